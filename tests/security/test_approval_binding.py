"""An approval token is honoured for the one decision, run and call it names, and only a
REQUIRE_APPROVAL answer can be approved. Each test here holds a line that a mutation run over
checkpoint/server/approvals.py could change without any other test noticing.
"""

from __future__ import annotations

import base64
import json

from server.conftest import PERSON_TOKEN

from warden.checkpoint.v1 import checkpoint_pb2 as pb

SUBNET = {"template": "web", "target": "10.20.0.0/24"}  # recon: approve_if a whole subnet


def subnet_call(run: pb.StartRunResponse, decision_id: str = "", token: str = "") -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                          tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(SUBNET)
    if decision_id:
        req.approval.decision_id, req.approval.token = decision_id, token
    return req


def ask(checkpoint, run: pb.StartRunResponse) -> str:
    asked = checkpoint.stub().Check(subnet_call(run), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return asked.decision_id


def approve(checkpoint, run_id: str, decision_id: str) -> pb.ApproveResponse:
    return checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run_id, decision_id=decision_id),
                                                 timeout=5)


def test_an_approval_token_is_for_the_decision_it_names_not_another_ask_of_the_same_call(checkpoint):
    run = checkpoint.start_run("recon")
    first, second = ask(checkpoint, run), ask(checkpoint, run)  # the same call, asked twice
    token = approve(checkpoint, run.run_id, first).approval_token
    got = checkpoint.stub().Check(subnet_call(run, second, token), timeout=5)
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "approval_invalid", "approval")
    assert "not this one" in got.reason and not got.HasField("grant")
    assert checkpoint.stub().Check(subnet_call(run, first, token), timeout=5).verdict == pb.VERDICT_ALLOW


def test_a_token_that_does_not_verify_is_refused_under_the_approval_rule(checkpoint):
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    got = checkpoint.stub().Check(subnet_call(run, asked, "wapv1.e30.AAAA"), timeout=5)
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "approval_invalid", "approval")
    assert got.reason.startswith("the approval token is not valid")


def test_only_a_require_approval_answer_of_the_named_run_can_be_approved(checkpoint):
    victim, other = checkpoint.start_run("recon"), checkpoint.start_run("recon")
    asked = ask(checkpoint, victim)
    # the right decision, named under another run
    elsewhere = approve(checkpoint, other.run_id, asked)
    assert (elsewhere.decision.verdict, elsewhere.decision.code, elsewhere.decision.rule) == (
        pb.VERDICT_DENY, "approval_invalid", "approval")
    assert not elsewhere.approval_token
    # an ALLOW that an approval produced carries the call's digest, but it is no question to answer:
    # approving it would be a second use of the same approval
    token = approve(checkpoint, victim.run_id, asked).approval_token
    allowed = checkpoint.stub().Check(subnet_call(victim, asked, token), timeout=5)
    assert allowed.verdict == pb.VERDICT_ALLOW
    assert checkpoint.records()[-1]["call_digest"]
    again = approve(checkpoint, victim.run_id, allowed.decision_id)
    assert (again.decision.verdict, again.decision.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert not again.approval_token
    replay = checkpoint.stub().Check(subnet_call(victim, allowed.decision_id, token), timeout=5)
    assert (replay.verdict, replay.code) == (pb.VERDICT_DENY, "approval_invalid")


def test_an_approval_token_names_the_approver_their_principal_and_the_recorded_act(checkpoint):
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    approved = approve(checkpoint, run.run_id, asked)
    label, _, payload, _ = approved.approval_token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert label == "wapv2"
    assert claims["decision_id"] == asked and claims["run_id"] == run.run_id
    assert (claims["approver"], claims["principal"]) == ("carol", "people")
    assert claims["approval_id"] == approved.decision.decision_id == checkpoint.records()[-1]["decision_id"]
    assert claims["call_digest"] == next(r for r in checkpoint.records() if r["decision_id"] == asked)["call_digest"]


def test_an_explained_approved_call_says_which_rule_was_approved_and_by_whom(checkpoint):
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    token = approve(checkpoint, run.run_id, asked).approval_token
    req = subnet_call(run, asked, token)
    req.explain = True
    got = checkpoint.stub().Check(req, timeout=5)
    assert got.verdict == pb.VERDICT_ALLOW
    approved = [o for o in got.explanation if o.outcome == "approved"]
    assert [(o.rule, o.detail) for o in approved] == [("rule:wide-scans-need-approval", "by carol")]
