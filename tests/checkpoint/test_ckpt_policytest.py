"""`warden policy test` like the peers' test runners: filter, JSON and JUnit reports, expected codes
checked against the codes warden gives, coverage of rules and scope entries, a schema for test files."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import yaml
from ckpt_helpers import FOLDERS

from checkpoint.policytest import suite_json_schema
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "docs" / "policy-test.schema.json"
SUITE = """suite: reader
defaults: {agent: reader}
cases:
  - name: a public doc is read
    tool: read_doc
    args: {doc: 'doc:a'}
    expect: {verdict: ALLOW, code: allowed}
  - name: a secret doc stays closed
    tool: read_doc
    args: {doc: 'doc:secret-1'}
    expect: {verdict: DENY, code: rule_denied, rule: "rule:no-secret-docs"}
  - name: wrong on purpose
    tool: read_doc
    args: {doc: 'doc:b'}
    expect: {verdict: DENY, code: tool_not_allowed}
"""


def folder_with(tmp_path: Path, body: str = SUITE) -> Path:
    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["engine"], folder)
    (folder / "tests").mkdir()
    (folder / "tests" / "x_test.yaml").write_text(body)
    return folder


def test_filter_runs_only_the_cases_it_names(tmp_path, capsys):
    folder = folder_with(tmp_path)
    assert main(["policy", "test", str(folder), "--filter", "SECRET", "-v"]) == 0
    out = capsys.readouterr().out
    assert "a secret doc stays closed" in out and "wrong on purpose" not in out and "1 passed, 0 failed" in out
    assert main(["policy", "test", str(folder), "--filter", "nothing like it"]) == 3


def test_json_report_lists_every_case_and_the_coverage(tmp_path, capsys):
    assert main(["policy", "test", str(folder_with(tmp_path)), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["passed"], report["failed"]) == (2, 1)
    failed = next(c for c in report["cases"] if not c["ok"])
    assert failed["name"] == "wrong on purpose" and failed["line"] == 12 and failed["code"] == "allowed"
    coverage = report["coverage"]
    assert "rule:no-secret-docs" not in coverage["rules_never_held"]  # a case made it hold
    assert "rule:boom-reads-missing-key" in coverage["rules_never_held"]
    untouched = {(e["agent"], e["entry"]) for e in coverage["scope_never_touched"]}
    assert ("reader", "doc:*") not in untouched and ("reader", "*.gov") in untouched


def test_junit_report_is_xml_a_ci_reads(tmp_path, capsys):
    out = tmp_path / "report.xml"
    assert main(["policy", "test", str(folder_with(tmp_path)), "--format", "junit", "--output", str(out)]) == 1
    root = ET.parse(out).getroot()
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "3", "1")
    [suite] = root.findall("testsuite")
    failing = [t for t in suite.findall("testcase") if t.find("failure") is not None]
    assert [t.get("name") for t in failing] == ["wrong on purpose"]
    assert "expected DENY/tool_not_allowed, got ALLOW/allowed" in failing[0].find("failure").get("message")


def test_an_expected_code_warden_never_gives_is_a_load_error_with_a_suggestion(tmp_path, capsys):
    folder = folder_with(tmp_path, SUITE.replace("code: tool_not_allowed", "code: tool_not_alowed"))
    assert main(["policy", "test", str(folder)]) == 3
    err = capsys.readouterr().err
    assert f"{folder / 'tests' / 'x_test.yaml'}:12:" in err
    assert "'tool_not_alowed' is not a code warden gives (did you mean 'tool_not_allowed'?)" in err


def test_a_rule_s_own_code_is_a_code_warden_gives(tmp_path, capsys):
    folder = folder_with(tmp_path)
    rules = folder / "rules" / "rules.yaml"
    rules.write_text(rules.read_text().replace("reason: secret documents stay closed",
                                               "reason: secret documents stay closed\ncode: secret_doc"))
    (folder / "tests" / "x_test.yaml").write_text(
        SUITE.replace('code: rule_denied, rule: "rule:no-secret-docs"', "code: secret_doc"))
    assert main(["policy", "test", str(folder), "--format", "json"]) == 1  # only "wrong on purpose" fails
    assert "not a code warden gives" not in capsys.readouterr().err


def test_the_committed_test_file_schema_is_current_and_the_shipped_tests_follow_it():
    assert json.loads(SCHEMA.read_text()) == suite_json_schema(), (
        "docs/policy-test.schema.json is stale: run `warden policy test-schema --output docs/policy-test.schema.json`")
    for path in (REPO / "policies" / "tests").glob("*_test.yaml"):
        suite = yaml.safe_load(path.read_text())
        jsonschema.validate(suite, suite_json_schema())
    bad = {"suite": "s", "cases": [{"name": "x", "tool": "t", "expect": {"verdict": "MAYBE", "code": "c"}}]}
    try:
        jsonschema.validate(bad, suite_json_schema())
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("a verdict outside the four passed the schema")
