"""A tool's input_schema is checked by a compiled draft-7 meta-schema before jsonschema is imported
(checkpoint/policy/input_schemas.py). The promise: the quick check never accepts a schema jsonschema
refuses, and every answer (and message) is jsonschema's."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import fastjsonschema
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.policy import draft7_metaschema, input_schemas

REPO = Path(__file__).resolve().parents[2]


def jsonschema_refuses(schema):
    """jsonschema's SchemaError for the schema, or None; a `$schema` that is not a string is refused by
    warden before jsonschema, which fails on one with a TypeError."""
    if schema.get("$schema") is not None and not isinstance(schema["$schema"], str):
        return jsonschema.SchemaError("$schema must be a string", path=["$schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return exc
    return None


def quick_accepts(schema) -> bool:
    try:
        draft7_metaschema.validate(schema)
    except fastjsonschema.JsonSchemaException:
        return False
    return True


# -- the committed module is the one `make gen` writes -------------------------------------------


def test_the_compiled_check_is_of_the_installed_draft7_metaschema():
    assert input_schemas.generated_sha256() == hashlib.sha256(input_schemas.metaschema_source()).hexdigest()


def test_the_compiled_check_is_what_make_gen_writes():
    committed = input_schemas.GENERATED.read_text()
    if f"fastjsonschema {fastjsonschema.VERSION}," not in committed.splitlines()[1]:
        pytest.skip(f"generated with another fastjsonschema than {fastjsonschema.VERSION}; run `make gen`")
    assert input_schemas.generated_text() == committed, "run `make gen`"


# -- never more lenient than jsonschema -------------------------------------------------------------

KEYWORDS = ["type", "properties", "required", "items", "additionalProperties", "enum", "const", "minimum",
            "maximum", "exclusiveMinimum", "multipleOf", "minLength", "maxLength", "pattern", "patternProperties",
            "format", "$ref", "$id", "$schema", "definitions", "allOf", "anyOf", "oneOf", "not", "if", "then",
            "else", "dependencies", "propertyNames", "contains", "minItems", "maxItems", "uniqueItems",
            "additionalItems", "default", "title", "readOnly", "examples", "description", "minProperties"]
TYPES = ["object", "array", "string", "integer", "number", "boolean", "null", "objectx", ""]
PATTERNS = ["^a+$", "[", "(?P<x>a)", "a{2,1}", "\\d", "(", "", "[a-z]*"]
URIS = ["http://json-schema.org/draft-07/schema#", "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-04/schema#",
        "#/definitions/x", "::nope", "urn:x", "", "a b"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(TYPES), st.sampled_from(PATTERNS), st.sampled_from(URIS), st.text(max_size=4),
)


def values(children):
    return st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.sampled_from(KEYWORDS + ["a", "b"]), children, max_size=4),
    )


anything = st.recursive(scalars, values, max_leaves=12)
schemas = st.dictionaries(st.sampled_from(KEYWORDS), anything, max_size=5)


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas)
def test_what_the_quick_check_accepts_jsonschema_accepts(schema):
    if quick_accepts(schema):
        assert jsonschema_refuses(schema) is None, schema


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schemas)
def test_check_answers_as_jsonschema_does_with_its_message(schema):
    refused = jsonschema_refuses(schema)
    if refused is None:
        input_schemas.check(schema)
    else:
        with pytest.raises(input_schemas.SchemaProblem) as problem:
            input_schemas.check(schema)
        assert problem.value.message.startswith(refused.message)
        assert problem.value.path == tuple(refused.path)


def test_the_quick_check_does_not_fill_in_defaults():
    """fastjsonschema fills a schema's defaults into what it validates unless told not to: a meta-schema
    check would then change the tool's schema (readOnly: false, items: true, ...)."""
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    input_schemas.check(schema)
    assert schema == {"type": "object", "properties": {"a": {"type": "string"}}}


@pytest.mark.parametrize(("schema", "words"), [
    ({"type": "object", "properties": {"a": {"type": 12}}}, "12 is not valid under any of the given schemas"),
    ({"type": "object", "properties": {"a": {"pattern": "["}}}, "'[' is not a 'regex'"),
    ({"type": "object", "properties": {"a": {"maxLength": True}}}, "True is not of type 'integer'"),
    ({"type": "object", "properties": {"a": {"maxLength": -1}}}, "-1 is less than the minimum of 0"),
    ({"type": "object", "required": ["a", "a"]}, "has non-unique elements"),
    # another draft: the quick check does not apply, jsonschema judges by that draft
    ({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "minProperties": "2"},
     "'2' is not of type 'integer'"),
])
def test_refused_schemas_are_refused_in_jsonschemas_words(schema, words):
    with pytest.raises(input_schemas.SchemaProblem) as problem:
        input_schemas.check(schema)
    assert words in problem.value.message


@pytest.mark.parametrize("draft", [["not", "a", "string"], 1, True, {"$ref": "x"}])
def test_a_schema_naming_its_draft_with_no_string_is_refused_in_words(draft):
    """jsonschema's validator_for fails with a TypeError on these: the loader crashed on `$schema: 1`."""
    with pytest.raises(input_schemas.SchemaProblem) as problem:
        input_schemas.check({"$schema": draft, "type": "object"})
    assert problem.value.path == ("$schema",)
    assert "$schema must be a string" in problem.value.message


def test_a_draft7_schema_the_quick_check_refuses_is_refused_by_jsonschema():
    with pytest.raises(input_schemas.SchemaProblem) as problem:
        input_schemas.check({"$schema": "http://json-schema.org/draft-07/schema#", "type": "objectx"})
    assert "is not valid under any of the given schemas" in problem.value.message


def test_a_uri_reference_only_the_quick_check_reads_is_accepted_as_jsonschema_accepts_it():
    schema = {"$id": "not a uri", "type": "object"}
    assert not quick_accepts(schema)
    input_schemas.check(schema)  # jsonschema (without rfc3987) accepts it: so does the loader


def test_the_explainer_words_a_refusal_and_builds_its_validator_once():
    explainer = input_schemas.Explainer({"type": "object", "properties": {"n": {"type": "integer"}}})
    assert explainer.explain({"n": "x"}) == ("n", "'x' is not of type 'integer'")
    first = explainer._validator
    assert explainer.explain({"n": 1}) is None
    assert explainer._validator is first


def test_a_check_imports_no_jsonschema(tmp_path):
    """The reason this module exists: a `warden check` of a good folder and a good request does not
    import jsonschema (nor referencing and attrs, which it brings)."""
    code = ("import sys; from checkpoint.policy import load_policy_dir; load_policy_dir(sys.argv[1]); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('jsonschema', 'referencing', 'attrs')))")
    done = subprocess.run([sys.executable, "-c", code, str(REPO / "policies")], capture_output=True, text=True,
                          timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
