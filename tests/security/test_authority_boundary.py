"""What a caller's principal was granted, and what an admin took away, bounds every run it is
given, a child's as much as a root's.

Over real gRPC with the shipped policies and the `globex` tenant of test_tenant_roles. The attacks:
a principal granted one tenant (or one agent) delegates into another and is handed a child run
there; a principal whose rights were narrowed lifts the pause of a run it may no longer ask for; a
child delegated by an agent version an admin retired goes on acting on the authority it granted.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .test_catalog_lifecycle import PEOPLE, reviewed_tenant
from .test_tenant_roles import TOKENS, digest, write_tenants


@pytest.fixture
def cp(start, policy_dir):
    """acme, globex and initech, as test_tenant_roles has them: carol operates acme and globex."""
    write_tenants(policy_dir)
    return start(auth=AuthPolicy(tokens={digest(TOKEN): "driver", **{digest(t): n for n, t in TOKENS.items()}}))


def _narrow_driver(cp, policy_dir: Path, old: str, new: str) -> None:
    driver = policy_dir / "principals" / "driver.yaml"
    text = driver.read_text()
    assert old in text
    driver.write_text(text.replace(old, new))
    assert cp.server.store.reload()


def _recon_delegates(cp, policy_dir: Path, *agents: str) -> None:
    recon = policy_dir / "agents" / "recon.yaml"
    recon.write_text(recon.read_text().replace("delegates: [triage]", f"delegates: [{', '.join(agents)}]"))
    acme = policy_dir / "tenants" / "acme.yaml"  # a wider recon goes live without review (docs/catalog.md)
    acme.write_text(acme.read_text().replace("review_changes: true", "review_changes: false"))
    assert cp.server.store.reload()


def _delegate(cp, person: str, agent: str) -> pb.CheckResponse:
    parent = cp.start_run("recon", person=person)
    assert parent.run_token, parent.decision
    req = pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token), delegation=pb.Delegation(agent=agent))
    return cp.stub().Check(req, timeout=5)


def test_a_delegation_is_no_way_into_a_tenant_the_callers_principal_was_not_granted(cp, policy_dir):
    _recon_delegates(cp, policy_dir, "triage", "scout")
    # carol operates acme and globex, so the person is no obstacle: only the caller's rights are
    assert _delegate(cp, "carol", "scout").child_run_token  # the shipped driver may ask for every tenant
    _narrow_driver(cp, policy_dir, 'tenants: ["*"]', "tenants: [acme]")
    into = _delegate(cp, "carol", "scout")
    # before: ALLOW with a child token for a globex run, whose acts (a resume) were then recorded in
    # globex under a principal with no right there
    assert (into.verdict, into.code, into.rule) == (pb.VERDICT_DENY, "caller_not_permitted", "principal")
    assert not into.child_run_token and not into.child_run_id and not into.HasField("grant")
    assert "'scout'" in into.reason and "'globex'" in into.reason
    record = cp.records()[-1]
    assert (record["action"], record["verdict"], record["code"], record["principal"]) == (
        "delegation", "DENY", "caller_not_permitted", "driver")
    assert _delegate(cp, "carol", "triage").child_run_token  # its own tenant stays open to it


def test_a_delegation_is_no_way_to_an_agent_the_callers_principal_may_not_ask_for(cp, policy_dir):
    _narrow_driver(cp, policy_dir, 'agents: ["*"]', "agents: [recon]")
    got = _delegate(cp, "alice", "triage")  # recon may delegate to triage; this caller may not run triage
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "caller_not_permitted", "principal")
    assert not got.child_run_token
    assert cp.records()[-1]["code"] == "caller_not_permitted"


def test_a_principal_that_may_no_longer_ask_for_a_runs_agent_cannot_resume_it_but_can_stop_it(cp, policy_dir):
    run = cp.start_run("recon", person="carol")
    assert run.run_token, run.decision
    _narrow_driver(cp, policy_dir, 'agents: ["*"]', "agents: [triage]")

    def act(what: str) -> pb.CheckResponse:
        request = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act=what, person="carol")
        return cp.stub().RecordAct(request, timeout=5).decision

    for widening in ("resume", "amend"):
        got = act(widening)  # before: recorded, so the driver lifted the pause
        assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "caller_not_permitted", "principal"), widening
        record = cp.records()[-1]
        assert (record["action"], record["run_id"], record["code"]) == (widening, run.run_id, "caller_not_permitted")
    # stopping a run never needs more than the person's role: a pause or cancel is still recorded
    assert act("pause").code == "recorded" and act("cancel").code == "recorded"


def test_a_child_delegated_by_a_retired_version_stops_with_it(start, policy_dir):
    reviewed_tenant(policy_dir)  # carol and dave are acme's admins
    running = start(auth=AuthPolicy(tokens={digest(TOKEN): "driver", **{digest(t): n for n, t in PEOPLE.items()}}))
    old = running.version("recon")
    parent = running.start_run("recon", old)
    child = running.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token),
                                                 delegation=pb.Delegation(agent="triage")), timeout=5)
    assert child.verdict == pb.VERDICT_ALLOW and child.child_run_token
    recon = policy_dir / "agents" / "recon.yaml"  # a narrowing edit goes live at once: old is superseded
    recon.write_text(recon.read_text().replace("allowlist: [create_task_from_template, get_task, list_templates]",
                                               "allowlist: [get_task, list_templates]"))
    assert running.server.store.reload() and running.version("recon") != old
    retired = running.stub(PEOPLE["carol"]).RetireAgentVersion(
        pb.RetireAgentVersionRequest(agent="recon", version=old, note="its persona leaked"), timeout=5)
    assert retired.decision.code == "catalog_changed"

    def get_task(token: str) -> pb.CheckResponse:
        req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"))
        req.tool_call.arguments.update({"task_id": "task-1"})
        return running.stub().Check(req, timeout=5)

    assert get_task(parent.run_token).code == "agent_version_retired"
    # before: the child (triage, whose own version is fine) was still allowed, with a grant, on
    # authority the retired recon version had delegated to it
    got = get_task(child.child_run_token)
    assert (got.verdict, got.code) == (pb.VERDICT_HALT, "agent_version_retired") and not got.HasField("grant")
    assert f"version {old} of agent 'recon' was retired" in got.reason
    record = running.records()[-1]
    assert (record["run_id"], record["agent"], record["code"]) == (child.child_run_id, "triage", "agent_version_retired")
