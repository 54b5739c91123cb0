"""The agent catalog's lifecycle (docs/catalog.md), against a real checkpoint.

The rules under test, from the seed: "An agent may propose a change to itself or to another
agent, but the proposal waits for a tenant admin, and until then the agent keeps the version it
had." "A tenant admin reviews every change" to allowlist and scope. Retired versions are never
pinned again and their runs halt; "rolling back is copying an old version forward, under the same
review rule". Every act is on the hash-chained record, with the actor from their credential.
"""

from __future__ import annotations

import hashlib

import grpc
import pytest
import yaml
from google.protobuf import struct_pb2
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

PEOPLE = {name: f"{name}-token-0123456789abcdef" for name in ("carol", "dave", "erin", "frank")}
ROLES = {"admin": ["carol", "dave"], "operator": ["erin", "alice"]}  # alice: the runs of these tests


def reviewed_tenant(policy_dir, review: bool = True) -> None:
    """acme as these tests need it: changes reviewed or not, carol and dave admins, erin operator."""
    path = policy_dir / "tenants" / "acme.yaml"
    tenant = yaml.safe_load(path.read_text())
    tenant.update(review_changes=review, roles=ROLES)
    path.write_text(yaml.safe_dump(tenant))


@pytest.fixture
def running(start, policy_dir):
    reviewed_tenant(policy_dir)
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    return start(auth=AuthPolicy(tokens=tokens))


def as_(running, person: str):
    return running.stub(PEOPLE[person])


def edit_triage(running, old: str, new: str) -> None:
    """Edit the triage agent's policy file and load it (as the watcher would once it settled)."""
    path = running.policies / "agents" / "triage.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    assert running.server.store.reload()


def live(running, agent: str = "triage") -> str:
    return running.server.store.current.agents[agent].version


def list_templates(running, version: str) -> pb.CheckResponse:
    """A call of list_templates by a new run of triage pinned to `version`."""
    request = pb.CheckRequest(
        run=pb.RunContext(tenant="acme", mode=pb.RUN_MODE_INTERACTIVE, actor_chain=[
            pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
            pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="triage", agent_version=version)]),
        tool_call=pb.ToolCall(tool="list_templates"))
    return running.stub().Check(running.with_run(request), timeout=5)


def propose(running, person: str, note: str = "", **change) -> pb.CatalogActResponse:
    return as_(running, person).ProposeAgentChange(pb.ProposeAgentChangeRequest(agent="triage", note=note, **change),
                                                   timeout=10)


def review(running, person: str, version: str, approve: bool = True) -> pb.CatalogActResponse:
    return as_(running, person).ReviewAgentChange(
        pb.ReviewAgentChangeRequest(agent="triage", version=version, approve=approve, note="read it"), timeout=10)


def changes(**fields) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(fields)
    return out


def catalog_records(running) -> list[dict]:
    return [r for r in running.records(catalog=True) if r["action"] == "catalog"]


NARROW = ("allowlist: [get_task, list_templates]", "allowlist: [get_task]")


# -- a policy file edit -------------------------------------------------------------------------


def test_a_file_edit_that_narrows_applies_at_once_and_is_recorded(running):
    before = live(running)
    edit_triage(running, *NARROW)
    assert live(running) != before
    assert list_templates(running, live(running)).code == "tool_not_allowed"
    applied = catalog_records(running)[-1]
    assert (applied["code"], applied["agent_version"], applied["caller"]) == ("catalog_changed", live(running),
                                                                              "policy-files")
    assert applied["arguments"]["act"] == "apply" and applied["arguments"]["note"] == "narrows"


def test_a_file_edit_that_widens_waits_for_an_admin_and_the_live_version_stays(running):
    before = live(running)
    edit_triage(running, "access: [read]", "access: [read, write]")  # more access, same tools
    assert live(running) == before
    edit_triage(running, "allowlist: [get_task, list_templates]",
                "allowlist: [get_task, list_templates, create_task_from_template]")
    assert live(running) == before  # new runs still pin the reviewed version
    [summary] = [a for a in as_(running, "erin").ListAgents(pb.ListAgentsRequest(), timeout=5).agents
                 if a.agent == "triage"]
    assert summary.live_version == before and len(summary.pending_versions) == 1
    pending = summary.pending_versions[0]
    *_, proposed, withdrawn = catalog_records(running)  # the first pending edit is replaced by the second
    assert (proposed["code"], proposed["agent_version"]) == ("proposed", pending)
    assert withdrawn["arguments"]["act"] == "withdraw" and withdrawn["arguments"]["note"] == f"replaced by {pending}"
    assert "tools added: create_task_from_template" in proposed["arguments"]["widens"]
    assert proposed["arguments"]["source"].endswith("triage.yaml:2")  # where the change was written
    # a pending version is never pinned by a new run
    started = running.start_run("triage", pending)
    assert (started.decision.verdict, started.decision.code) == (pb.VERDICT_DENY, "agent_version_not_approved")
    # an admin approves it: it goes live
    approved = review(running, "carol", pending)
    assert approved.decision.code == "catalog_changed" and approved.version.status == "live"
    assert live(running) == pending


def test_a_tenant_that_does_not_review_applies_a_widening_edit_at_once(start, policy_dir):
    reviewed_tenant(policy_dir, review=False)
    running = start()
    before = live(running)
    edit_triage(running, "persona: You read", "persona: You now read")
    assert live(running) != before


def test_the_edit_to_a_version_already_pending_replaces_it(running):
    edit_triage(running, "persona: You read", "persona: You now read")
    [first] = as_(running, "erin").AgentHistory(pb.AgentHistoryRequest(agent="triage"), timeout=5).versions[-1:]
    edit_triage(running, "persona: You now read", "persona: You then read")
    history = {v.version: v.status for v in as_(running, "erin").AgentHistory(
        pb.AgentHistoryRequest(agent="triage"), timeout=5).versions}
    assert history[first.version] == "withdrawn"
    assert list(history.values()).count("pending") == 1


def test_approved_changes_survive_a_restart_and_the_file_does_not_undo_them(running, start):
    response = propose(running, "erin", changes=changes(persona="You read tasks carefully."))
    assert response.decision.code == "proposed"
    version = response.version.version
    assert review(running, "carol", version).decision.code == "catalog_changed"
    running.server.stop(grace=0.5)
    again = start(data_dir=running.data, key=running.key,
                  auth=AuthPolicy(tokens={hashlib.sha256(TOKEN.encode()).digest(): "driver"}))
    assert live(again) == version  # the catalog holds what the admin approved; the file is unchanged


# -- proposals, reviews and who may do them -----------------------------------------------------


def test_a_person_proposal_waits_and_the_proposer_cannot_approve_it(running):
    before = live(running)
    response = propose(running, "carol", note="needs create", changes=changes(persona="Another persona."))
    assert response.decision.verdict == pb.VERDICT_ALLOW and response.version.status == "pending"
    assert response.version.diff and "persona changed" in response.version.widens
    assert live(running) == before
    own = review(running, "carol", response.version.version)
    assert (own.decision.verdict, own.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    assert "another admin" in own.decision.reason
    assert review(running, "dave", response.version.version).decision.code == "catalog_changed"
    assert live(running) == response.version.version


def test_an_operator_proposes_but_only_an_admin_reviews(running):
    response = propose(running, "erin", changes=changes(persona="Another persona."))
    assert response.decision.code == "proposed"
    refused = review(running, "erin", response.version.version)
    assert refused.decision.code == "role_required" and "is not an admin of tenant 'acme'" in refused.decision.reason
    by_process = running.stub().ReviewAgentChange(pb.ReviewAgentChangeRequest(
        agent="triage", version=response.version.version, approve=True), timeout=5)
    assert by_process.decision.code == "caller_not_permitted"  # the driver is a process, not a person
    assert live(running) != response.version.version


def test_a_person_without_a_role_can_neither_propose_nor_read(running):
    refused = propose(running, "frank", changes=changes(persona="Mine now."))
    assert refused.decision.code == "role_required" and "is not an operator" in refused.decision.reason
    assert as_(running, "frank").ListAgents(pb.ListAgentsRequest(), timeout=5).agents == []
    with pytest.raises(grpc.RpcError) as err:
        as_(running, "frank").AgentHistory(pb.AgentHistoryRequest(agent="triage"), timeout=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_every_act_and_every_refusal_is_recorded_with_the_person(running):
    response = propose(running, "erin", note="why not", changes=changes(persona="P2."))
    review(running, "erin", response.version.version)  # refused
    review(running, "dave", response.version.version, approve=False)
    acts = [(r["caller"], r["arguments"]["act"], r["code"]) for r in catalog_records(running)
            if r["caller"] != "policy-files"]
    assert acts == [("erin", "propose", "proposed"), ("erin", "approve", "role_required"),
                    ("dave", "reject", "catalog_changed")]
    statuses = {v.version: v.status for v in as_(running, "erin").AgentHistory(
        pb.AgentHistoryRequest(agent="triage"), timeout=5).versions}
    assert statuses[response.version.version] == "rejected"
    again = review(running, "carol", response.version.version)
    assert again.decision.code == "not_pending"  # a rejection is final for that proposal


@pytest.mark.parametrize("change,needle", [
    ({"changes": changes(tenant="other")}, "cannot change tenant"),
    ({"changes": changes(allowlist=["update_agent"])}, "manages agents"),
    ({"changes": changes(allowlist=["no_such_tool"])}, "unknown tool"),
    ({"definition_yaml": "kind: Agent\nname: triage\npersona: x\nscope: {bogus: 1}\n"}, "<proposal for triage>:4"),
    ({"definition_yaml": "kind: Agent\nname: recon\npersona: x\n"}, "names agent 'recon'"),
    ({"rollback_to": "0" * 20}, "has no version"),
    ({}, "carries a definition"),
    ({"definition_yaml": "kind: Agent\nname: triage\npersona: x\n#" + "x" * 70_000}, "larger than 65536 bytes"),
])
def test_a_bad_proposal_is_refused_with_where_and_why(running, change, needle):
    refused = propose(running, "erin", **change)
    assert refused.decision.verdict == pb.VERDICT_DENY and needle in refused.decision.reason, refused.decision


def test_an_unchanged_proposal_is_refused(running):
    assert propose(running, "erin", changes=changes()).decision.code == "no_change"


# -- an agent's own proposal --------------------------------------------------------------------


def _forged(token: str) -> str:
    """The token with its signature's end changed: never the token itself (one in a few hundred
    signatures already ends in "AA")."""
    return token[:-2] + ("BA" if token.endswith("AA") else "AA")


def test_an_agent_proposes_through_its_run_and_keeps_its_version(running):
    started = running.start_run("triage", live(running))
    before = live(running)
    request = pb.ProposeAgentChangeRequest(agent="triage", note="I need to create tasks",
                                           changes=changes(persona="A bolder triage agent."),
                                           run=pb.RunContext(run_token=started.run_token))
    response = running.stub().ProposeAgentChange(request, timeout=10)
    assert response.decision.code == "proposed" and response.version.proposed_by == f"agent:triage@{before}"
    assert live(running) == before
    record = catalog_records(running)[-1]
    assert record["run_id"] == started.run_id and record["accountable_person"] == "alice"
    # another caller cannot present that run's token
    stolen = as_(running, "erin").ProposeAgentChange(request, timeout=10)
    assert stolen.decision.code == "run_token_invalid"
    forged = running.stub().ProposeAgentChange(pb.ProposeAgentChangeRequest(
        agent="triage", changes=changes(persona="x"), run=pb.RunContext(run_token=_forged(started.run_token))),
        timeout=10)
    assert forged.decision.code == "run_token_invalid"


# -- retirement and rollback --------------------------------------------------------------------


def test_a_retired_version_halts_its_runs_and_is_never_pinned_again(running):
    old = live(running)
    started = running.start_run("triage", old)
    edit_triage(running, *NARROW)  # narrows: live at once, the old version superseded
    retired = as_(running, "carol").RetireAgentVersion(pb.RetireAgentVersionRequest(
        agent="triage", version=old, note="leaked persona"), timeout=5)
    assert retired.decision.code == "catalog_changed" and retired.version.status == "retired"
    call = pb.CheckRequest(run=pb.RunContext(run_token=started.run_token), tool_call=pb.ToolCall(tool="get_task"))
    call.tool_call.arguments.update({"task_id": "task-1"})
    halted = running.stub().Check(call, timeout=5)
    assert (halted.verdict, halted.code) == (pb.VERDICT_HALT, "agent_version_retired")
    again = running.start_run("triage", old)
    assert (again.decision.verdict, again.decision.code) == (pb.VERDICT_DENY, "agent_version_retired")
    assert propose(running, "erin", rollback_to=old).decision.code == "agent_version_retired"


def test_the_live_version_cannot_be_retired_and_only_an_admin_retires(running):
    request = pb.RetireAgentVersionRequest(agent="triage", version=live(running))
    assert as_(running, "carol").RetireAgentVersion(request, timeout=5).decision.code == "version_live"
    edit_triage(running, *NARROW)  # the version named is superseded now, so it may be retired: by an admin
    assert as_(running, "erin").RetireAgentVersion(request, timeout=5).decision.code == "role_required"
    assert as_(running, "frank").RetireAgentVersion(request, timeout=5).decision.code == "role_required"
    assert as_(running, "dave").RetireAgentVersion(request, timeout=5).decision.code == "catalog_changed"


def test_a_rollback_copies_the_old_version_forward_under_review(running):
    old = live(running)
    edit_triage(running, *NARROW)
    narrowed = live(running)
    assert narrowed != old
    response = propose(running, "erin", rollback_to=old, note="list_templates was needed")
    assert response.decision.code == "proposed" and response.version.version == old  # the same content, the same id
    assert "rollback" in response.version.source and live(running) == narrowed
    pinned_run = running.start_run("triage", narrowed)
    review(running, "dave", old)
    assert live(running) == old
    assert list_templates(running, old).verdict == pb.VERDICT_ALLOW
    # the run that pinned the narrowed version keeps it
    call = pb.CheckRequest(run=pb.RunContext(run_token=pinned_run.run_token),
                           tool_call=pb.ToolCall(tool="list_templates"))
    assert running.stub().Check(call, timeout=5).code == "tool_not_allowed"


# -- recorded before it takes effect, and one answer to a race ------------------------------------


def test_an_act_the_log_cannot_take_is_not_done(running):
    response = propose(running, "erin", changes=changes(persona="P3."))
    version = response.version.version
    running.server.log.close()  # the log can no longer take records
    approved = review(running, "carol", version)
    assert (approved.decision.verdict, approved.decision.code) == (pb.VERDICT_DENY, "audit_unavailable")
    assert running.server.store.current.catalog.status("triage", version) == "pending"
    assert live(running) != version


def test_two_admins_approving_at_once_make_one_change(running):
    from concurrent.futures import ThreadPoolExecutor

    version = propose(running, "erin", changes=changes(persona="P4.")).version.version
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda who: review(running, who, version), ["carol", "dave"] * 4))
    assert sorted(a.decision.code for a in answers).count("catalog_changed") == 1
    assert {a.decision.code for a in answers} == {"catalog_changed", "not_pending"}
    approvals = [r for r in catalog_records(running) if r["arguments"]["act"] == "approve"
                 and r["code"] == "catalog_changed"]
    assert len(approvals) == 1 and live(running) == version


# -- found in review: self-approval through one's own run, moving an agent's tenant ----


def test_an_admin_cannot_approve_what_the_agent_of_their_own_run_proposed(running):
    started = running.start_run("triage", live(running), person="carol")  # carol: an admin who runs agents
    assert started.run_token, started.decision
    response = running.stub().ProposeAgentChange(pb.ProposeAgentChangeRequest(
        agent="triage", changes=changes(scope={"access": ["read"], "subjects": ["*"]}),
        run=pb.RunContext(run_token=started.run_token)), timeout=10)
    assert response.decision.code == "proposed"
    own = review(running, "carol", response.version.version)
    assert own.decision.code == "caller_not_permitted" and "accountable for the run" in own.decision.reason
    assert review(running, "dave", response.version.version).decision.code == "catalog_changed"


def test_a_proposal_cannot_move_an_agent_to_another_tenant(running):
    moved = propose(running, "erin", definition_yaml=(
        "kind: Agent\nname: triage\ntenant: default\npersona: Reads.\nallowlist: [get_task]\n"
        "scope: {access: [read], subjects: ['*']}\n"))
    assert moved.decision.code == "invalid_request" and "moving an agent" in moved.decision.reason


def test_an_agent_proposes_changed_fields_only(running):
    started = running.start_run("triage", live(running))
    for change in ({"definition_yaml": "kind: Agent\nname: triage\npersona: x\n"}, {"rollback_to": live(running)}):
        refused = running.stub().ProposeAgentChange(pb.ProposeAgentChangeRequest(
            agent="triage", run=pb.RunContext(run_token=started.run_token), **change), timeout=10)
        assert refused.decision.code == "invalid_request" and "changed fields" in refused.decision.reason


def test_a_file_edit_moving_an_agent_out_of_a_reviewing_tenant_waits_for_review(running):
    before = live(running)
    path = running.policies / "agents" / "triage.yaml"
    path.write_text(path.read_text().replace("tenant: acme", "tenant: default"))  # default reviews nothing
    assert running.server.store.reload()
    assert live(running) == before  # acme, which it leaves, reviews changes: the move waits


def test_proposals_waiting_for_review_are_capped_per_agent(running):
    from checkpoint.policy.catalog import MAX_PENDING_PER_AGENT

    for i in range(MAX_PENDING_PER_AGENT):
        assert propose(running, "erin", changes=changes(persona=f"P{i}.")).decision.code == "proposed"
    refused = propose(running, "erin", changes=changes(persona="One more."))
    assert refused.decision.code == "too_many_proposals"
    [summary] = [a for a in as_(running, "carol").ListAgents(pb.ListAgentsRequest(), timeout=5).agents
                 if a.agent == "triage"]
    assert len(summary.pending_versions) == MAX_PENDING_PER_AGENT
