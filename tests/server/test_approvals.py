"""Approvals are honoured only when the checkpoint's own log vouches for them; persons get no grant;
every decision is recorded whatever its arguments hold."""

from __future__ import annotations

import math

from checkpoint.server.approvals import Approvals
from checkpoint.server.single_use import SingleUse
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.token_keys import KeySet

from .conftest import PERSON_TOKEN
from .helpers import tool_call

SUBNET = {"template": "web", "target": "10.20.0.0/24"}


def subnet_call(token: str, args=SUBNET) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(args)
    return req


def asked(checkpoint, args=SUBNET):
    run = checkpoint.start_run("recon")
    resp = checkpoint.stub().Check(subnet_call(run.run_token, args), timeout=5)
    assert resp.verdict == pb.VERDICT_REQUIRE_APPROVAL, resp
    return run, resp.decision_id


def approve(checkpoint, run, decision_id, token=PERSON_TOKEN, note="looks fine") -> pb.ApproveResponse:
    return checkpoint.stub(token).Approve(
        pb.ApproveRequest(run_id=run.run_id, decision_id=decision_id, note=note), timeout=5
    )


def approved_call(run, decision_id, approval_token, args=SUBNET):
    req = subnet_call(run.run_token, args)
    req.approval.decision_id, req.approval.token = decision_id, approval_token
    return req


def test_an_approval_by_a_person_allows_the_call_with_a_grant(checkpoint):
    run, asked_id = asked(checkpoint)
    approval = approve(checkpoint, run, asked_id)
    assert (approval.decision.verdict, approval.decision.code) == (pb.VERDICT_ALLOW, "approved")
    assert approval.approval_token.startswith("wapv2.")
    act = checkpoint.records()[-1]
    assert (act["action"], act["caller"], act["principal"]) == ("approval", "carol", "people")
    assert act["arguments"] == {"decision_id": asked_id, "note": "looks fine"}
    resp = checkpoint.stub().Check(approved_call(run, asked_id, approval.approval_token), timeout=5)
    assert (resp.verdict, resp.code, resp.rule) == (pb.VERDICT_ALLOW, "allowed", "approval")
    assert "approved by carol" in resp.reason and resp.HasField("grant")


def test_a_rejection_is_recorded_as_the_persons_act(checkpoint):
    run, asked_id = asked(checkpoint)
    got = checkpoint.stub(PERSON_TOKEN).Reject(
        pb.RejectRequest(run_id=run.run_id, decision_id=asked_id, note="no"), timeout=5)
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_ALLOW, "rejected")
    act = checkpoint.records()[-1]
    assert (act["action"], act["caller"], act["code"]) == ("rejection", "carol", "rejected")


def test_a_made_up_approval_is_refused_and_recorded(checkpoint):
    run, asked_id = asked(checkpoint)
    resp = checkpoint.stub().Check(approved_call(run, asked_id, "wapv1.e30.AAAA"), timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert not resp.HasField("grant")
    assert checkpoint.records()[-1]["code"] == "approval_invalid"
    refused = approve(checkpoint, run, "made-up")
    assert (refused.decision.verdict, refused.decision.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert not refused.approval_token


def test_an_approval_is_used_once(checkpoint):
    run, asked_id = asked(checkpoint)
    token = approve(checkpoint, run, asked_id).approval_token
    first = checkpoint.stub().Check(approved_call(run, asked_id, token), timeout=5)
    assert first.verdict == pb.VERDICT_ALLOW
    again = checkpoint.stub().Check(approved_call(run, asked_id, token), timeout=5)
    assert (again.verdict, again.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert "already approved and used" in again.reason
    # a second approval of the same decision is not a second use either
    second = approve(checkpoint, run, asked_id).approval_token
    assert checkpoint.stub().Check(approved_call(run, asked_id, second), timeout=5).code == "approval_invalid"


def test_an_approval_does_not_carry_over_to_other_arguments_or_runs(checkpoint):
    run, asked_id = asked(checkpoint)
    token = approve(checkpoint, run, asked_id).approval_token
    other_target = checkpoint.stub().Check(
        approved_call(run, asked_id, token, args={"template": "web-basic", "target": "10.20.0.0/24"}), timeout=5
    )
    assert (other_target.verdict, other_target.code) == (pb.VERDICT_DENY, "approval_invalid")
    other = checkpoint.start_run("recon")
    other_run = checkpoint.stub().Check(approved_call(other, asked_id, token), timeout=5)
    assert (other_run.verdict, other_run.code) == (pb.VERDICT_DENY, "approval_invalid")


def test_a_person_acting_directly_is_decided_and_recorded_but_gets_no_grant(checkpoint):
    req = pb.CheckRequest(
        run=pb.RunContext(run_id="run-p", mode=pb.RUN_MODE_INTERACTIVE,
                          actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice")]),
        tool_call=pb.ToolCall(tool="lookup_order"),
    )
    req.tool_call.arguments.update({"order_id": "ord-1", "customer": "customer:jane"})
    resp = checkpoint.stub().Check(checkpoint.with_run(req), timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW and not resp.HasField("grant")
    record = checkpoint.records()[-1]
    assert record["agent"] is None and record["accountable_person"] == "alice"


def test_arguments_without_a_canonical_form_are_still_recorded(checkpoint):
    version = checkpoint.version("recon")
    req = tool_call("recon", version, "no_such_tool", {})
    req.tool_call.arguments["x"] = math.nan
    resp = checkpoint.stub().Check(checkpoint.with_run(req), timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "unknown_tool")
    record = checkpoint.records()[-1]
    assert record["decision_id"] == resp.decision_id and "unrecordable" in record["arguments"]


def test_the_resolved_tenant_is_recorded_when_the_request_omits_it(checkpoint):
    version = checkpoint.version("recon")
    req = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-1"}))
    assert not req.run.tenant
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.tenant == "acme" and checkpoint.records()[-1]["tenant"] == "acme"


def _delegations_need_approval(policy_dir):
    (policy_dir / "rules" / "delegation.yaml").write_text(
        "kind: Rule\nname: delegations-need-approval\neffect: approve_if\ncondition: 'true'\n"
        "actions: [delegation]\nreason: a person approves every child run\n")


def test_an_approved_delegation_does_not_carry_over_to_a_wider_one(start, policy_dir):
    _delegations_need_approval(policy_dir)
    checkpoint = start()
    run = checkpoint.start_run("recon")

    def delegation(narrowing: pb.Scope | None, decision_id: str = "", token: str = "") -> pb.CheckRequest:
        req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), delegation=pb.Delegation(agent="triage"))
        if narrowing is not None:
            req.delegation.narrowing.CopyFrom(narrowing)
            req.delegation.budget.turns = 2
        if decision_id:
            req.approval.decision_id, req.approval.token = decision_id, token
        return req

    narrow = pb.Scope(tools=["get_task"])
    asked = checkpoint.stub().Check(delegation(narrow), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL
    token = approve(checkpoint, run, asked.decision_id).approval_token
    wider = checkpoint.stub().Check(delegation(None, asked.decision_id, token), timeout=5)
    assert (wider.verdict, wider.code) == (pb.VERDICT_DENY, "approval_invalid") and not wider.child_run_token
    assert "different call" in wider.reason
    honest = checkpoint.stub().Check(delegation(narrow, asked.decision_id, token), timeout=5)
    assert (honest.verdict, honest.rule) == (pb.VERDICT_ALLOW, "approval") and honest.child_run_token
    assert list(honest.child_authority.tools) == ["get_task"] and honest.child_budget.turns == 2
    # an approved delegation is not an approval of a tool call either
    # (it answers the delegation rule only: the scan's own rule still asks a person)
    stolen = checkpoint.stub().Check(approved_call(run, asked.decision_id, token), timeout=5)
    assert (stolen.verdict, stolen.code) == (pb.VERDICT_REQUIRE_APPROVAL, "approval_required")
    assert not stolen.HasField("grant")


def test_an_approved_delegation_is_refused_once_the_child_agent_changed(start, policy_dir):
    _delegations_need_approval(policy_dir)
    checkpoint = start()
    run = checkpoint.start_run("recon")
    old_triage = checkpoint.version("triage")

    def delegation(decision_id: str = "", token: str = "") -> pb.CheckRequest:
        req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), delegation=pb.Delegation(agent="triage"))
        if decision_id:
            req.approval.decision_id, req.approval.token = decision_id, token
        return req

    asked = checkpoint.stub().Check(delegation(), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL and asked.child_agent_version == old_triage
    token = approve(checkpoint, run, asked.decision_id).approval_token
    # Before the call is sent again, triage's definition changes (narrowed: live at once, a new version).
    triage = policy_dir / "agents" / "triage.yaml"
    triage.write_text(triage.read_text().replace("allowlist: [get_task, list_templates]", "allowlist: [get_task]"))
    assert checkpoint.server.store.reload() and checkpoint.version("triage") != old_triage
    got = checkpoint.stub().Check(delegation(asked.decision_id, token), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_invalid") and not got.child_run_token


def test_the_approved_call_digest_binds_every_part_of_the_call(tmp_path):
    """An approval names one whole call. Within a run the run token already pins the agent and its
    version, so only the digest itself can show that it binds them too (leaving the agent
    version out of it once broke no test)."""
    approvals = Approvals(KeySet(None), b"k" * 32, SingleUse(tmp_path / "used.db"))

    def digest(run_id="run-1", agent="recon", agent_version="recon@1", child="", args=SUBNET,
               action="tool_call", key=None) -> str:
        req = subnet_call("", args)
        req.run.run_id = run_id
        resp = pb.CheckResponse(agent=agent, agent_version=agent_version, child_agent_version=child)
        signer = approvals if key is None else Approvals(KeySet(None), key, SingleUse(tmp_path / "other.db"))
        return signer.digest(req, resp, action)

    same = digest()
    assert same == digest() and len(same) == 64
    assert digest(action="plan", args={}) != digest(action="model_call", args={})  # both bodies empty
    changed = {
        "run": digest(run_id="run-2"),
        "agent": digest(agent="triage"),
        "agent version": digest(agent_version="recon@2"),
        "child version": digest(child="triage@1"),
        "arguments": digest(args={**SUBNET, "target": "10.20.0.0/16"}),
        "action": digest(action=None),
        "key": digest(key=b"K" * 32),
    }
    assert [part for part, value in changed.items() if value == same] == []


def test_a_rejection_is_never_answered_for_a_call_already_spent(checkpoint):
    """The approved call is spent at the moment the rejection is made (another thread, another
    worker): whichever takes the single-use key first wins, and the other is told so. Answering
    "rejected" for a call that ran would put a lie on the record."""
    run, asked_id = asked(checkpoint)
    store = checkpoint.server.service.approvals._single_use
    claim = store.claim

    def spent_just_before(key: str, used_by: str) -> str | None:
        if used_by.startswith("rejected"):  # the approved call wins the race for the key
            assert claim(key, "used by run run-elsewhere") is None
        return claim(key, used_by)

    store.claim = spent_just_before
    try:
        got = checkpoint.stub(PERSON_TOKEN).Reject(
            pb.RejectRequest(run_id=run.run_id, decision_id=asked_id, note="no"), timeout=5)
    finally:
        store.claim = claim
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert "settled (used by run run-elsewhere)" in got.decision.reason
    act = checkpoint.records()[-1]
    assert (act["action"], act["code"], act["verdict"]) == ("rejection", "approval_invalid", "DENY")
    assert store.used_by(asked_id) == "used by run run-elsewhere"


def test_a_failed_single_use_store_refuses_approvals_and_rejections_on_the_record(checkpoint):
    run, asked_id = asked(checkpoint)
    checkpoint.server.service.approvals._single_use.close()  # every read and claim now raises
    approval = approve(checkpoint, run, asked_id)
    assert (approval.decision.verdict, approval.decision.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert not approval.approval_token and "single-use store failed" in approval.decision.reason
    rejection = checkpoint.stub(PERSON_TOKEN).Reject(
        pb.RejectRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert (rejection.decision.verdict, rejection.decision.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert "could not be made final" in rejection.decision.reason
    acts = [r for r in checkpoint.records() if r["action"] in ("approval", "rejection")]
    assert [(r["action"], r["code"]) for r in acts] == [("approval", "approval_invalid"),
                                                        ("rejection", "approval_invalid")]
