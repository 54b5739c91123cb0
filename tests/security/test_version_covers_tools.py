"""An agent version covers the tool definitions and rules it resolves (docs/catalog.md).

The attack: leave every Agent document alone and edit a tool it calls (drop its `touches`, widen
its input schema) or a rule that fences it. Before, the agent kept its version id, so new runs
reached what the tool used to fence with nobody's review. Now the edit is a new version of every
agent that resolves the tool; in a reviewing tenant it waits for an admin, and until then new
runs are decided within the reviewed version's tools and rules. A real checkpoint on loopback,
a real SQLite catalog and decision log.
"""

from __future__ import annotations

import hashlib

import pytest
import yaml
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import tool_call

PEOPLE = {name: f"{name}-token-0123456789abcdef" for name in ("carol", "dave")}
FETCH = {
    "kind": "Tool", "name": "fetch_page", "description": "Fetch a page of a host.", "access": "read",
    "input_schema": {"type": "object", "additionalProperties": False, "required": ["host"],
                     "properties": {"host": {"type": "string", "maxLength": 200,
                                             "pattern": "^[a-z0-9.-]+\\.example\\.com$"}}},
    "touches": {"subjects": "[args.host]"},
}
FETCHER = {"kind": "Agent", "name": "fetcher", "tenant": "acme", "persona": "You read lab pages.",
           "allowlist": ["fetch_page"], "scope": {"access": ["read"], "subjects": ["*.lab.example.com"]}}
OUTSIDE = {"host": "payroll.corp.example.com"}  # a host the fence keeps out: scope is *.lab.example.com


@pytest.fixture
def running(start, policy_dir, request):
    path = policy_dir / "tenants" / "acme.yaml"
    tenant = yaml.safe_load(path.read_text())
    tenant.update(roles={"admin": ["carol", "dave"], "operator": ["alice"]})
    if getattr(request, "param", None) == "default review":
        del tenant["review_changes"]  # review is what a tenant gets unless it opts out
    path.write_text(yaml.safe_dump(tenant))
    (policy_dir / "tools" / "fetch_page.yaml").write_text(yaml.safe_dump(FETCH))
    (policy_dir / "agents" / "fetcher.yaml").write_text(yaml.safe_dump(FETCHER))
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    return start(auth=AuthPolicy(tokens=tokens))


def edit_tool(running, edit) -> None:
    path = running.policies / "tools" / "fetch_page.yaml"
    doc = yaml.safe_load(path.read_text())
    edit(doc)
    path.write_text(yaml.safe_dump(doc))
    assert running.server.store.reload()


def fetch(running, args=OUTSIDE, version: str = "") -> pb.CheckResponse:
    request = tool_call("fetcher", version or running.version("fetcher"), "fetch_page", args)
    return running.stub().Check(running.with_run(request), timeout=10)


def pending(running, agent: str = "fetcher") -> str:
    [found] = [a for a in running.stub(PEOPLE["carol"]).ListAgents(pb.ListAgentsRequest(), timeout=5).agents
               if a.agent == agent]
    assert len(found.pending_versions) == 1, found
    return found.pending_versions[0]


def approve(running, version: str, agent: str = "fetcher") -> None:
    running.stub(PEOPLE["carol"]).ReviewAgentChange(
        pb.ReviewAgentChangeRequest(agent=agent, version=version, approve=True, note="read it"), timeout=10)


def drop_touches(doc):
    del doc["touches"]


def empty_touches(doc):
    doc["touches"] = {"subjects": "[]"}


def other_argument(doc):
    doc["input_schema"]["properties"]["via"] = {"type": "string"}
    doc["touches"] = {"subjects": "has(args.via) ? [args.via] : []"}


def widen_schema_and_drop_touches(doc):
    doc["input_schema"]["properties"]["host"] = {"type": "string"}
    del doc["touches"]


EDITS = [drop_touches, empty_touches, other_argument, widen_schema_and_drop_touches]


@pytest.mark.parametrize("edit", EDITS, ids=[e.__name__ for e in EDITS])
def test_a_tool_edit_that_unfences_an_agent_waits_for_review_and_new_runs_stay_fenced(running, edit):
    before = running.version("fetcher")
    assert fetch(running).code == "subject_out_of_scope"
    edit_tool(running, edit)
    assert running.version("fetcher") == before  # new runs still pin the reviewed version
    waiting = pending(running)
    proposed = [r for r in running.records(catalog=True) if r["action"] == "catalog"
                and r["agent_version"] == waiting][-1]
    assert proposed["code"] == "proposed"
    assert any(w.startswith("tool fetch_page:") for w in proposed["arguments"]["widens"]), proposed["arguments"]
    # a new run of the live version: decided within the tool as it was reviewed
    answer = fetch(running)
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "subject_out_of_scope"), answer
    # a new run that names the waiting version is refused: it is not approved
    refused = running.start_run("fetcher", waiting)
    assert not refused.run_token and refused.decision.code == "agent_version_not_approved"


def test_once_an_admin_approves_the_widened_tool_new_runs_get_it_and_running_runs_keep_their_pin(running):
    started_before = running.with_run(tool_call("fetcher", running.version("fetcher"), "fetch_page", OUTSIDE))
    edit_tool(running, drop_touches)
    approve(running, pending(running))
    assert fetch(running).verdict == pb.VERDICT_ALLOW  # reviewed: now it is what the agent may do
    old_run = running.stub().Check(started_before, timeout=10)  # the run begun before the edit
    assert (old_run.verdict, old_run.code) == (pb.VERDICT_DENY, "subject_out_of_scope")


@pytest.mark.parametrize("running", ["default review"], indirect=True)
def test_review_is_on_when_a_tenant_does_not_say(running):
    before = running.version("fetcher")
    edit_tool(running, drop_touches)
    assert running.version("fetcher") == before and pending(running)
    assert fetch(running).code == "subject_out_of_scope"


def test_a_tool_edit_that_narrows_applies_at_once(running):
    before = running.version("fetcher")
    edit_tool(running, lambda doc: doc["touches"].update(connections="[args.host]"))
    after = running.version("fetcher")
    assert after != before  # the version covers the tool: narrowed, and live without review
    refused = running.start_run("fetcher", before)
    assert refused.decision.code == "agent_version_not_approved"  # pinning it would undo the narrowing


def test_an_agent_that_does_not_resolve_the_tool_keeps_its_version(running):
    triage = running.version("triage")
    edit_tool(running, drop_touches)
    assert running.version("triage") == triage


def test_removing_a_rule_that_fences_an_agent_waits_for_review(running):
    before = running.version("refunds")
    path = running.policies / "rules" / "refunds.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    path.write_text(yaml.safe_dump_all([d for d in docs if d["name"] != "refund-writes-need-approval"]))
    assert running.server.store.reload()
    assert running.version("refunds") == before
    waiting = pending(running, "refunds")
    [proposed] = [r for r in running.records(catalog=True) if r["action"] == "catalog"
                  and r["agent_version"] == waiting and r["code"] == "proposed"]
    assert "rule refund-writes-need-approval no longer applies" in proposed["arguments"]["widens"]
    write = tool_call("refunds", before, "propose_refund",
                      {"invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:acme-1",
                       "amount_usd": 10.0, "reason": "duplicate charge"})
    answer = running.stub().Check(running.with_run(write), timeout=10)
    assert answer.verdict == pb.VERDICT_REQUIRE_APPROVAL, answer


def test_while_a_widened_schema_waits_the_model_is_shown_the_reviewed_one(running):
    def shown() -> dict:
        resolved = running.stub().ResolveAgent(pb.ResolveAgentRequest(agent="fetcher"), timeout=5)
        [spec] = [t for t in resolved.tool_specs if t.name == "fetch_page"]
        return dict(spec.input_schema.fields["properties"].struct_value.fields["host"].struct_value.fields)

    assert "pattern" in shown()
    edit_tool(running, widen_schema_and_drop_touches)
    assert "pattern" in shown()  # the live version's schema: what its calls are decided within
    approve(running, pending(running))
    assert "pattern" not in shown()
