"""What a pinned agent version may do, held by the engine and the catalog: every approve-if rule
answered, a budget ceiling removed counted as a widening, a management tool refused on a version
restored from the catalog. Real policy folders, a real SQLite catalog, the real decision function."""

from __future__ import annotations

from pathlib import Path

import pytest
from ckpt_helpers import build
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.engine import decide
from checkpoint.policy import load_policy_dir, pinned
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.lifecycle import widenings
from warden.budget import FIELDS as BUDGET_FIELDS
from warden.checkpoint.v1 import checkpoint_pb2 as pb

TENANT = """\
kind: Tenant
name: acme
review_changes: {review}
"""
TOOLS = """\
kind: Tool
name: write_doc
access: write
input_schema:
  type: object
  additionalProperties: false
  required: [doc]
  properties:
    doc: {{type: string, maxLength: 200}}
touches:
  subjects: "[args.doc]"
---
kind: Tool
name: tweak
access: write
agent_management: {management}
input_schema: {{type: object}}
"""
AGENT = """\
kind: Agent
name: worker
tenant: acme
persona: Writes documents inside a fence.
allowlist: {allowlist}
scope:
  access: [write]
  subjects: ["doc:*"]
budget:
{budget}
"""
# three approve-if rules that all apply to the same write, each answered by its own approvers
APPROVE_IF = ("legal", "finance", "security")


def approve_if_rules(names: tuple[str, ...] = APPROVE_IF) -> str:
    return "\n---\n".join(f"kind: Rule\nname: {name}\neffect: approve_if\ncondition: 'tool.access == \"write\"'\n"
                         for name in names)


def folder(root: Path, *, review: bool = True, management: bool = False, allowlist: str = "[write_doc, tweak]",
           budget: dict[str, float] | None = None, rules: tuple[str, ...] = ()) -> Path:
    (root / "tools").mkdir(parents=True, exist_ok=True)
    (root / "tenant.yaml").write_text(TENANT.format(review=str(review).lower()))
    (root / "tools" / "tools.yaml").write_text(TOOLS.format(management=str(management).lower()))
    lines = "\n".join(f"  {k}: {v}" for k, v in (budget if budget is not None else {"tool_calls": 5}).items())
    (root / "agent.yaml").write_text(AGENT.format(allowlist=allowlist, budget=lines or "  {}"))
    if rules:
        (root / "rules.yaml").write_text(approve_if_rules(rules))
    return root


# -- approve-if rules: one approval answers only the rules it names --------------------------------


@pytest.fixture(scope="module")
def approve_if_policies(tmp_path_factory: pytest.TempPathFactory):
    return load_policy_dir(folder(tmp_path_factory.mktemp("rules"), rules=APPROVE_IF))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(answered=st.sets(st.sampled_from([*APPROVE_IF, "other-rule", ""])))
def test_an_approval_of_some_approve_if_rules_does_not_answer_the_others(approve_if_policies, answered):
    request = build(approve_if_policies, chain=("worker",), tool="write_doc", args={"doc": "doc:plan"})
    response = decide(approve_if_policies, request, approver="carol", approved_rules=frozenset(answered))
    if set(APPROVE_IF) <= answered:
        assert (response.verdict, response.rule) == (pb.VERDICT_ALLOW, "approval")
    else:
        assert (response.verdict, response.code) == (pb.VERDICT_REQUIRE_APPROVAL, "approval_required")
        assert sorted(response.approval_rules) == sorted(f"rule:{r}" for r in APPROVE_IF)


def test_rules_answered_without_an_approver_are_no_approval(approve_if_policies):
    request = build(approve_if_policies, chain=("worker",), tool="write_doc", args={"doc": "doc:plan"})
    response = decide(approve_if_policies, request, approver="", approved_rules=frozenset(APPROVE_IF))
    assert response.verdict == pb.VERDICT_REQUIRE_APPROVAL


@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_answer_names_every_approve_if_rule_that_asks(tmp_path, count):
    names = APPROVE_IF[:count]
    p = load_policy_dir(folder(tmp_path / "p", rules=names))
    response = decide(p, build(p, chain=("worker",), tool="write_doc", args={"doc": "doc:plan"}))
    assert response.verdict == pb.VERDICT_REQUIRE_APPROVAL
    assert sorted(response.approval_rules) == sorted(f"rule:{n}" for n in names)
    first, *others = sorted(names, key=lambda n: response.rule != f"rule:{n}")
    assert response.rule == f"rule:{first}"
    if others:
        assert response.reason.endswith(f" (and {', '.join(repr(n) for n in others)})"), response.reason
    else:
        assert "(and" not in response.reason


# -- budget ceilings: raising or removing one widens -----------------------------------------------


def _snapshot(tmp: Path, budget: dict[str, float]) -> dict:
    return load_policy_dir(folder(tmp, review=False, budget=budget)).agents["worker"].snapshot()


@settings(max_examples=25, deadline=None)
@given(field=st.sampled_from([f for f in BUDGET_FIELDS if f != "spend_usd"]), start=st.integers(1, 1000),
       change=st.sampled_from(["removed", "raised", "lowered", "kept"]))
def test_a_budget_ceiling_removed_or_raised_is_a_widening(tmp_path_factory, field, start, change):
    tmp = tmp_path_factory.mktemp("budget")
    before = _snapshot(tmp / "a", {field: start})
    after_budget = {"removed": {}, "raised": {field: start + 1}, "lowered": {field: max(start - 1, 0)},
                    "kept": {field: start}}[change]
    after = _snapshot(tmp / "b", after_budget)
    found = [w for w in widenings(before, after) if w.startswith(f"budget.{field} ")]
    if change in ("removed", "raised"):
        assert found, (change, widenings(before, after))
    else:
        assert not found


def test_an_edit_that_removes_the_budget_waits_for_review_and_new_runs_keep_the_ceiling(tmp_path):
    root = folder(tmp_path / "p", budget={"tool_calls": 5})
    catalog = AgentCatalog(tmp_path / "catalog.db")
    first = load_policy_dir(root, catalog=catalog)
    folder(root, budget={})
    edited = load_policy_dir(root, catalog=catalog)
    live = edited.agents["worker"]
    assert live.version == first.agents["worker"].version  # the reviewed version stays live
    assert live.budget.tool_calls == 5
    [change] = [c for c in edited.catalog_changes if c.agent == "worker"]
    assert change.act == "propose" and any(w.startswith("budget.tool_calls") for w in change.widens)


# -- management tools: never on an allowlist, not even a version restored from the catalog ---------


def test_a_management_tool_is_refused_on_a_version_restored_from_the_catalog(tmp_path):
    root = folder(tmp_path / "p", review=False)
    db = tmp_path / "catalog.db"
    old = load_policy_dir(root, catalog=AgentCatalog(db)).agents["worker"].version
    # the tool becomes a management tool: the files must drop it, the old version still lists it
    folder(root, review=False, management=True, allowlist="[write_doc]")
    load_policy_dir(root, catalog=AgentCatalog(db))
    fresh = load_policy_dir(root, catalog=AgentCatalog(db))  # a restarted checkpoint: versions read back
    restored = fresh.agent_version("worker", old)
    assert restored is not None and "tweak" in restored.tools
    request = build(fresh, chain=("worker",), tool="tweak", args={}, versions={"worker": old})
    response = decide(fresh, request, pinned=pinned.load(fresh, request))
    assert (response.verdict, response.code) == (pb.VERDICT_DENY, "agent_management_tool")



# -- `warden policy check`: a tool that reads a target but declares no touches ------------------

UNFENCED = """\
kind: Tool
name: probe
access: read
input_schema:
  type: object
  properties:
    {argument}: {{type: string{format}}}
"""


@pytest.mark.parametrize(("argument", "fmt", "warned"), [
    ("host", "", True), ("target_url", "", True), ("peer-address", "", True), ("where", ", format: uri", True),
    ("to", ", format: email", True), ("task_id", "", False), ("program", "", False)])
def test_policy_check_warns_about_a_tool_that_reads_a_target_without_touches(tmp_path, argument, fmt, warned):
    from checkpoint.policylint import warnings

    root = folder(tmp_path / "p")
    (root / "tools" / "probe.yaml").write_text(UNFENCED.format(argument=argument, format=fmt))
    found = [w for w in warnings(load_policy_dir(root)) if w.startswith("tool 'probe'")]
    assert bool(found) is warned, found
    fenced = UNFENCED.format(argument=argument, format=fmt) + "touches:\n  subjects: '[]'\n"  # declared: scope decides
    (root / "tools" / "probe.yaml").write_text(fenced)
    assert not [w for w in warnings(load_policy_dir(root)) if w.startswith("tool 'probe'")]


# -- a catalog whose versions were recorded before versions covered tools and rules --------------


def test_a_version_recorded_without_tool_definitions_is_superseded_not_narrowed_on_upgrade(tmp_path):
    import json
    import sqlite3

    root = folder(tmp_path / "p")
    db = tmp_path / "catalog.db"
    current = load_policy_dir(root, catalog=AgentCatalog(db)).agents["worker"]
    legacy = {k: v for k, v in current.snapshot().items() if k not in ("tool_defs", "rule_defs")}
    with sqlite3.connect(db) as conn:  # the catalog as an older checkpoint left it
        conn.execute("delete from catalog_items where kind = 'agent'")  # the one table shape (catalog_items.py)
        conn.execute("insert into catalog_items (kind, tenant, name, version, body, first_seen, revision, state) "
                     "values ('agent', '', 'worker', 'legacy', ?, '2026-01-01T00:00:00Z', '', 'live')",
                     [json.dumps(legacy)])
        conn.execute("update catalog_heads set version = 'legacy', file_version = 'legacy' where kind = 'agent'")
    catalog = AgentCatalog(db)
    upgraded = load_policy_dir(root, catalog=catalog)
    assert upgraded.agents["worker"].version == current.version  # applied: nothing it may do changed
    assert catalog.status("worker", "legacy") == "superseded"
    [change] = [c for c in upgraded.catalog_changes if c.agent == "worker"]
    assert change.act == "apply" and change.note == "recorded with the definitions of its tools and rules"


# -- every spelling of a tool edit: a new version whenever the tool changes, and never a narrowing
#    that lets a call reach more ---------------------------------------------------------------

TOUCHES = st.dictionaries(st.sampled_from(["subjects", "connections", "nodes"]),
                          st.sampled_from(["[args.doc]", "[]", "has(args.via) ? [args.via] : []"]), max_size=3)
SCHEMA_EXTRAS = st.sampled_from([{}, {"maxLength": 200}, {"pattern": "^doc:[a-z]+$"}, {"maxLength": 20}])


def _tool_doc(touches: dict, extra: dict, description: str, masked: list[str]) -> str:
    import yaml

    doc = {"kind": "Tool", "name": "write_doc", "access": "write", "description": description,
           "input_schema": {"type": "object", "additionalProperties": False, "required": ["doc"],
                            "properties": {"doc": {"type": "string", **extra}, "via": {"type": "string"}}},
           "audit": {"hash": masked}}
    if touches:
        doc["touches"] = touches
    return yaml.safe_dump(doc)


def _narrower_or_same(old: dict, new: dict) -> bool:
    """The oracle, written apart from tool_widenings: may `new` reach only what `old` reaches?"""
    return (all(new["touches"].get(dim) == expr for dim, expr in old["touches"].items())
            and new["extra"] == old["extra"] and new["description"] == old["description"]
            and set(old["masked"]) <= set(new["masked"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.fixed_dictionaries({"touches": TOUCHES, "extra": SCHEMA_EXTRAS,
                                              "description": st.sampled_from(["", "Write a document."]),
                                              "masked": st.lists(st.sampled_from(["doc", "via"]), unique=True)}),
                      min_size=2, max_size=2))
def test_every_tool_edit_is_a_new_version_and_only_a_narrowing_skips_review(tmp_path_factory, edits):
    old, new = edits
    root = folder(tmp_path_factory.mktemp("edit"))
    catalog = AgentCatalog(None)
    tools = root / "tools" / "tools.yaml"
    rest = tools.read_text().split("---\n", 1)[1]
    tools.write_text(_tool_doc(**old) + "---\n" + rest)
    before = load_policy_dir(root, catalog=catalog).agents["worker"]
    tools.write_text(_tool_doc(**new) + "---\n" + rest)
    after = load_policy_dir(root, catalog=catalog)
    defined = after.file_versions["worker"]
    assert (defined == before.version) == (old == new or (
        sorted(old["masked"]) == sorted(new["masked"]) and {**old, "masked": 0} == {**new, "masked": 0}))
    said = [w for w in widenings(before.snapshot(), catalog.get("worker", defined).snapshot())
            if w.startswith("tool write_doc:")]
    assert (not said) == _narrower_or_same(old, new), (old, new, said)
    # and the catalog acts on it: a widening waits, the live version stays the reviewed one
    assert (after.agents["worker"].version == before.version) == bool(said) or defined == before.version


def test_where_a_tenant_opts_out_a_widening_applies_at_once_and_the_old_version_stays_pinnable(tmp_path):
    root = folder(tmp_path / "p", review=False, budget={"tool_calls": 5})
    catalog = AgentCatalog(tmp_path / "catalog.db")
    old = load_policy_dir(root, catalog=catalog).agents["worker"].version
    folder(root, review=False, budget={"tool_calls": 9})  # widens: applied, not proposed
    edited = load_policy_dir(root, catalog=catalog)
    assert edited.agents["worker"].version != old
    [change] = [c for c in edited.catalog_changes if c.agent == "worker"]
    assert (change.act, change.note) == ("apply", "the tenant does not review changes")
    assert catalog.status("worker", old) == "superseded"  # not narrowed away: the edit took nothing
    assert ("worker", old) not in edited.unpinnable
