"""Approvals are honoured only when the checkpoint's own log vouches for them; persons get no grant;
every decision is recorded whatever its arguments hold."""

from __future__ import annotations

import math

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import run_context, tool_call

SUBNET = {"template": "web", "target": "10.20.0.0/24"}


def asked(checkpoint, args=SUBNET, run_id="run-1"):
    version = checkpoint.version("recon")
    resp = checkpoint.stub().Check(
        tool_call("recon", version, "create_task_from_template", args, run_id=run_id), timeout=5
    )
    assert resp.verdict == pb.VERDICT_REQUIRE_APPROVAL, resp
    return version, resp.decision_id


def approved_call(version, decision_id, args=SUBNET, run_id="run-1", approver="bob"):
    req = tool_call("recon", version, "create_task_from_template", args, run_id=run_id)
    req.approval.decision_id, req.approval.approver = decision_id, approver
    return req


def test_an_approval_of_a_logged_require_approval_answer_allows_with_a_grant(checkpoint):
    version, asked_id = asked(checkpoint)
    resp = checkpoint.stub().Check(approved_call(version, asked_id), timeout=5)
    assert (resp.verdict, resp.code, resp.rule) == (pb.VERDICT_ALLOW, "allowed", "approval")
    assert "approved by bob" in resp.reason and resp.HasField("grant")


def test_a_made_up_approval_is_refused_and_recorded(checkpoint):
    version = checkpoint.version("recon")
    resp = checkpoint.stub().Check(approved_call(version, "made-up"), timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert not resp.HasField("grant")
    assert checkpoint.records()[-1]["code"] == "approval_invalid"


def test_an_approval_is_used_once(checkpoint):
    version, asked_id = asked(checkpoint)
    first = checkpoint.stub().Check(approved_call(version, asked_id), timeout=5)
    assert first.verdict == pb.VERDICT_ALLOW
    again = checkpoint.stub().Check(approved_call(version, asked_id), timeout=5)
    assert (again.verdict, again.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert "already approved and used" in again.reason


def test_an_approval_does_not_carry_over_to_other_arguments_or_runs(checkpoint):
    version, asked_id = asked(checkpoint)
    other_target = checkpoint.stub().Check(
        approved_call(version, asked_id, args={"template": "other", "target": "10.20.0.0/24"}), timeout=5
    )
    assert (other_target.verdict, other_target.code) == (pb.VERDICT_DENY, "approval_invalid")
    other_run = checkpoint.stub().Check(approved_call(version, asked_id, run_id="run-2"), timeout=5)
    assert (other_run.verdict, other_run.code) == (pb.VERDICT_DENY, "approval_invalid")


def test_a_person_acting_directly_is_decided_and_recorded_but_gets_no_grant(checkpoint):
    req = pb.CheckRequest(
        run=pb.RunContext(run_id="run-p", mode=pb.RUN_MODE_INTERACTIVE,
                          actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice")]),
        tool_call=pb.ToolCall(tool="lookup_order"),
    )
    req.tool_call.arguments.update({"order_id": "ord-1", "customer": "customer:jane"})
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW and not resp.HasField("grant")
    record = checkpoint.records()[-1]
    assert record["agent"] is None and record["accountable_person"] == "alice"


def test_arguments_without_a_canonical_form_are_still_recorded(checkpoint):
    version = checkpoint.version("recon")
    req = tool_call("recon", version, "no_such_tool", {})
    req.tool_call.arguments["x"] = math.nan
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "unknown_tool")
    record = checkpoint.records()[-1]
    assert record["decision_id"] == resp.decision_id and "unrecordable" in record["arguments"]


def test_the_resolved_tenant_is_recorded_when_the_request_omits_it(checkpoint):
    version = checkpoint.version("recon")
    req = tool_call("recon", version, "get_task", {"task_id": "task-1"})
    req.run.tenant = ""
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.tenant == "acme" and checkpoint.records()[-1]["tenant"] == "acme"


def _delegations_need_approval(policy_dir):
    (policy_dir / "rules" / "delegation.yaml").write_text(
        "kind: Rule\nname: delegations-need-approval\neffect: approve_if\ncondition: 'true'\n"
        "actions: [delegation]\nreason: a person approves every child run\n")


def test_an_approved_delegation_does_not_carry_over_to_a_wider_one(start, policy_dir):
    _delegations_need_approval(policy_dir)
    checkpoint = start()
    version = checkpoint.version("recon")

    def delegation(narrowing: pb.Scope | None, approval: str = "") -> pb.CheckRequest:
        req = pb.CheckRequest(run=run_context("recon", version), delegation=pb.Delegation(agent="triage"))
        if narrowing is not None:
            req.delegation.narrowing.CopyFrom(narrowing)
            req.delegation.budget.turns = 2
        if approval:
            req.approval.decision_id, req.approval.approver = approval, "bob"
        return req

    narrow = pb.Scope(tools=["get_task"])
    asked = checkpoint.stub().Check(delegation(narrow), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL
    wider = checkpoint.stub().Check(delegation(None, asked.decision_id), timeout=5)
    assert (wider.verdict, wider.code) == (pb.VERDICT_DENY, "approval_invalid") and not wider.chain_token
    assert "arguments" in wider.reason
    honest = checkpoint.stub().Check(delegation(narrow, asked.decision_id), timeout=5)
    assert (honest.verdict, honest.rule) == (pb.VERDICT_ALLOW, "approval") and honest.chain_token
    assert list(honest.child_authority.tools) == ["get_task"] and honest.child_budget.turns == 2
    # an approved delegation is not an approval of a tool call either
    call = tool_call("recon", version, "create_task_from_template", SUBNET)
    call.approval.decision_id, call.approval.approver = asked.decision_id, "bob"
    stolen = checkpoint.stub().Check(call, timeout=5)
    assert (stolen.verdict, stolen.code) == (pb.VERDICT_DENY, "approval_invalid")


def test_an_approved_delegation_is_refused_once_the_child_agent_changed(start, policy_dir):
    _delegations_need_approval(policy_dir)
    checkpoint = start()
    version = checkpoint.version("recon")
    old_triage = checkpoint.version("triage")

    def delegation(approval: str = "") -> pb.CheckRequest:
        req = pb.CheckRequest(run=run_context("recon", version), delegation=pb.Delegation(agent="triage"))
        if approval:
            req.approval.decision_id, req.approval.approver = approval, "bob"
        return req

    asked = checkpoint.stub().Check(delegation(), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL and asked.child_agent_version == old_triage
    # Before the person approves, triage's definition changes (a new persona is a new version).
    triage = policy_dir / "agents" / "triage.yaml"
    triage.write_text(triage.read_text().replace("persona: You read", "persona: You now read"))
    assert checkpoint.server.store.reload() and checkpoint.version("triage") != old_triage
    got = checkpoint.stub().Check(delegation(asked.decision_id), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_invalid") and not got.chain_token
