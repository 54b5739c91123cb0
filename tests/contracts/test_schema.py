"""The editor JSON Schema is generated from the models and committed; it must stay current."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from checkpoint.cli import policy_json_schema

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "policy.schema.json"


def test_committed_schema_is_current():
    assert json.loads(SCHEMA.read_text()) == policy_json_schema(), (
        "docs/policy.schema.json is stale: run `warden policy schema --output docs/policy.schema.json`"
    )


def test_shipped_policies_validate_against_the_schema():
    import yaml

    schema = policy_json_schema()
    root = Path(__file__).resolve().parents[2] / "policies"
    files = [p for p in root.rglob("*.yaml") if not p.name.endswith("_test.yaml")]
    assert files
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            jsonschema.validate(doc, schema)


def test_schema_rejects_unknown_keys():
    schema = policy_json_schema()
    bad = {"kind": "Agent", "name": "x", "persona": "p", "allowlist": [], "alowlist": []}
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(bad))
    assert errors
