"""Rules read the subjects as the checkpoint reads them (docs/cel.md, `touched`): a rule written
over the normalised host, address or URL parts holds for every spelling the subject reader folds,
where a rule over the raw text (`args.target.endsWith(...)`) misses all but one. Both engines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import ENGINES, build, outcome
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint.cel.typed import ListOf, Obj
from checkpoint.engine.as_read import as_read
from checkpoint.policy import PolicySet, load_policy_dir
from checkpoint.policy.celtypes import RULE_SHAPES
from checkpoint.policy.policyset import read_touched

FILES = {
    "instance.yaml": "kind: Instance\n",
    "tenant.yaml": "kind: Tenant\nname: acme\n",
    "tools.yaml": """kind: Tool
name: scan
access: read
input_schema:
  type: object
  additionalProperties: false
  required: [target]
  properties:
    target: {type: string, maxLength: 300}
touches:
  subjects: "[args.target]"
""",
    "agents.yaml": """kind: Agent
name: recon
tenant: acme
persona: p
allowlist: [scan]
scope: {access: [read], subjects: ["*"]}
""",
    "rules.yaml": """kind: Rule
name: no-bank
effect: deny_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.host == "bank.example" || s.host.endsWith(".bank.example"))'
---
kind: Rule
name: no-db
effect: deny_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.address == "10.9.9.9")'
---
kind: Rule
name: no-books
effect: deny_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.host.endsWith(".xn--bcher-kva.example"))'
---
kind: Rule
name: no-admin-path
effect: deny_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.kind == "url" && s.path.startsWith("/admin"))'
---
kind: Rule
name: no-vip
effect: deny_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.name.startsWith("customer:vip-"))'
---
kind: Rule
name: wide
effect: approve_if
tools: [scan]
condition: 'touched.subjects.exists(s, s.range)'
""",
}

@pytest.fixture(scope="module")
def loaded(tmp_path_factory: Any) -> dict[str, PolicySet]:
    out = {}
    for engine in ENGINES:
        root: Path = tmp_path_factory.mktemp(f"read-{engine}")
        for name, text in FILES.items():
            (root / name).write_text(text)
        out[engine] = load_policy_dir(root, cel_engine=engine)
    return out


def scan(p: PolicySet, target: str) -> tuple[str, str, str | None]:
    got = outcome(p, build(p, chain=["recon"], tool="scan", args={"target": target}))
    return got.verdict, got.code, got.rule


DOTS = st.sampled_from([".", "\uff0e", "\u3002", "\uff61"])


def _case(draw: Any, text: str) -> str:
    return "".join(c.upper() if draw(st.booleans()) else c for c in text)


@st.composite
def bank_hosts(draw: Any) -> str:
    """x.bank.example in another spelling: case, Unicode full stops, a trailing dot, in a URL."""
    labels = [_case(draw, label) for label in draw(st.sampled_from([["bank", "example"], ["x", "bank", "example"],
                                                                     ["a", "b", "bank", "example"]]))]
    host = draw(DOTS).join(labels) + draw(st.sampled_from(["", "."]))
    return draw(st.sampled_from(["{}", "https://{}/", "HTTP://{}:8080/x/../y", "wss://{}"])).format(host)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=60, deadline=None)
@given(target=bank_hosts())
def test_a_rule_over_the_host_as_read_holds_in_every_spelling(loaded, engine, target):
    assert scan(loaded[engine], target) == ("DENY", "rule_denied", "rule:no-bank"), target


ADDRESSES = ("10.9.9.9", "::ffff:10.9.9.9", "::FFFF:a09:909", "\uff11\uff10.9.9.9", "10\uff0e9\uff0e9\uff0e9",
             "http://10.9.9.9/", "https://[::ffff:a09:909]:8443/")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("target", ADDRESSES)
def test_a_rule_over_the_address_as_read_holds_in_every_spelling(loaded, engine, target):
    assert scan(loaded[engine], target) == ("DENY", "rule_denied", "rule:no-db")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("target, rule", [
    ("shop.b\u00fccher.example", "rule:no-books"), ("SHOP.B\u00dcCHER.EXAMPLE.", "rule:no-books"),
    ("shop.xn--bcher-kva.example", "rule:no-books"), ("https://a.b\u00fccher\u3002example/", "rule:no-books"),
    ("https://h.example/x/../admin/", "rule:no-admin-path"), ("https://h.example/%61dmin", "rule:no-admin-path"),
    ("customer:\uff56ip-1", "rule:no-vip"), ("customer:vip-1", "rule:no-vip"),
])
def test_rules_read_unicode_hosts_url_paths_and_names_normalised(loaded, engine, target, rule):
    assert scan(loaded[engine], target) == ("DENY", "rule_denied", rule)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_range_is_a_range_whatever_its_spelling_and_other_targets_pass(loaded, engine):
    p = loaded[engine]
    for target in ("10.20.0.0/24", "::ffff:10.20.0.0/120", "10.20.0.7/32"):
        expected = ("ALLOW", "allowed", "allow") if target.endswith("/32") else (
            "REQUIRE_APPROVAL", "approval_required", "rule:wide")
        assert scan(p, target) == expected, target
    for target in ("bank.example.org", "notbank.example", "10.9.9.8", "customer:vip", "https://h.example/admins"):
        if target.endswith("admins"):
            assert scan(p, target)[2] == "rule:no-admin-path"  # /admins starts with /admin: as written
            continue
        assert scan(p, target) == ("ALLOW", "allowed", "allow"), target


def test_the_read_subjects_are_built_only_when_an_applicable_rule_reads_them(loaded):
    """`touched` costs a map per subject: decide() fills it only for a rule that names it, and
    its fields are the ones the type check declares."""
    p = loaded["native"]
    seen: list[dict[str, Any]] = []
    prepare = p.prepare_rule_activation

    def spy(variables: dict[str, Any]) -> Any:
        seen.append(variables)
        return prepare(variables)

    p.prepare_rule_activation = spy
    try:
        scan(p, "web.example.com")
        shape = RULE_SHAPES["touched"]
        assert isinstance(shape, Obj)
        touched = seen[-1]["touched"]
        assert list(touched) == shape.field_names()
        [read] = touched["subjects"]
        item = dict(shape.fields)["subjects"]
        assert isinstance(item, ListOf) and isinstance(item.item, Obj)
        # the fields the rules of `scan` select, in declared order; as_read builds every one
        assert list(read) == [f for f in item.item.field_names() if f in ("kind", "host", "address", "range",
                                                                             "path", "name")]
        assert list(as_read(read_touched("subjects", "web.example.com"))) == item.item.field_names()
        assert read["host"] == "web.example.com" and read["kind"] == "host"
        # a model call: no rule of it reads `touched`, so it is the empty map
        seen.clear()
        outcome(p, build(p, chain=["recon"], model={"provider": "a", "model": "m"}))
        assert all(not v["touched"] for v in seen)
    finally:
        del p.prepare_rule_activation


def test_only_the_dimensions_and_fields_a_rule_selects_are_built_and_any_other_reading_builds_all():
    from checkpoint.engine.as_read import FIELDS, selection

    assert selection(['touched.subjects.exists(s, s.range)']) == ({"subjects"}, ("range",))
    got = selection(['touched . nodes.exists(s, s.name == "x") || touched.images.exists(i, i. host == "")'])
    assert got == ({"nodes", "images"}, ("host", "name"))
    everything = {"images", "nodes", "connections", "threads", "subjects"}
    for condition in ('touched["nodes"].exists(s, s.range)', 'size(touched) > 0', 'touched.subjects == [] || touched'):
        assert selection([condition]).dimensions == everything, condition
    assert selection(['args.x == 1']) == (set(), ())
    # a field named by any condition that reads touched is built for all of them
    assert selection(['touched.subjects.exists(s, s.port == 1)', 'tool.name == "x" && args.path == ""']).fields == (
        "port",)
    assert set(FIELDS) == {"kind", "text", "host", "address", "range", "scheme", "port", "path", "name"}


def test_policy_check_warns_about_a_rule_over_the_raw_text_of_a_touched_subject(tmp_path):
    """`warden policy check` points a rule over `args.target` (which the tool touches as a
    subject) to `touched`, and says nothing of a rule over an argument no tool reads as one."""
    from checkpoint.policylint import warnings

    raw = FILES["rules.yaml"] + """---
kind: Rule
name: raw-bank
effect: deny_if
tools: [scan]
condition: 'args.target.endsWith(".bank.example")'
---
kind: Rule
name: any-tool
effect: deny_if
condition: 'has(args.target) && args.target == "x"'
"""
    root = tmp_path / "p"
    root.mkdir()
    for name, text in {**FILES, "rules.yaml": raw}.items():
        (root / name).write_text(text)
    found = [w for w in warnings(load_policy_dir(root)) if "as written" in w]
    assert [w.split(" (")[0] for w in found] == ["rule 'any-tool'", "rule 'raw-bank'"], found
    assert "args.target" in found[1] and "touched.subjects" in found[1] and "'scan'" in found[1]
    assert not [w for w in warnings(load_policy_dir(Path(__file__).resolve().parents[2] / "policies"))
                if "as written" in w]
