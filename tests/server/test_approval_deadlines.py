"""Every REQUIRE_APPROVAL has a deadline: the policy's default, a rule's own overriding it. After it
Approve and the approved call are refused `approval_timed_out`, on the record, and the run's driver
records the expiry, which no approval outlives. Time is moved by shifting the clock deadlines are
measured with (the one that stamps the records), never by waiting."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.policy import PolicyLoadError, load_policy_dir
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.structs import to_struct

from .conftest import PERSON_TOKEN

SUBNET = {"template": "web", "target": "10.20.0.0/24"}
RULE = "name: wide-scans-need-approval\n"


def with_timeout(policy_dir: Path, seconds: int) -> None:
    rules = policy_dir / "rules" / "recon.yaml"
    text = rules.read_text()
    assert RULE in text
    rules.write_text(text.replace(RULE, RULE + f"approval_timeout_seconds: {seconds}\n"))


def call(run, decision_id: str = "", token: str = "") -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                          tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(SUBNET)
    if decision_id:
        req.approval.decision_id, req.approval.token = decision_id, token
    return req


def ask(checkpoint, run) -> pb.CheckResponse:
    asked = checkpoint.stub().Check(call(run), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return asked


def approve(checkpoint, run, decision_id: str) -> pb.ApproveResponse:
    return checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=decision_id),
                                                 timeout=5)


def at(checkpoint, asked: pb.CheckResponse, offset: float) -> None:
    """Move the deadline clock to `offset` seconds after the ask was decided."""
    decided = asked.decided_at.seconds + asked.decided_at.nanos / 1e9
    checkpoint.server.service.approvals.wall = lambda: decided + offset


def expire(checkpoint, run, decision_id: str, person: str = "") -> pb.CheckResponse:
    act = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="expire", person=person,
                              details=to_struct({"decision_id": decision_id}))
    return checkpoint.stub().RecordAct(act, timeout=5).decision


def deadline_seconds(asked: pb.CheckResponse) -> float:
    return (asked.approval_deadline.ToMicroseconds() - asked.decided_at.ToMicroseconds()) / 1e6


def test_the_answer_names_its_deadline_from_the_policy_default(checkpoint):
    asked = ask(checkpoint, checkpoint.start_run("recon"))
    assert deadline_seconds(asked) == 24 * 3600
    assert "a person answers by" in asked.reason


def test_a_rules_own_timeout_overrides_the_default(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    assert deadline_seconds(ask(checkpoint, checkpoint.start_run("recon"))) == 600


def test_a_timeout_on_a_rule_that_asks_nobody_is_refused_at_load(policy_dir):
    rules = policy_dir / "rules" / "recon.yaml"
    rules.write_text(rules.read_text().replace("name: no-intrusive-templates-in-background\n",
                                               "name: no-intrusive-templates-in-background\n"
                                               "approval_timeout_seconds: 60\n"))
    with pytest.raises(PolicyLoadError, match="approve_if rules only"):
        load_policy_dir(policy_dir)


def test_approve_after_the_deadline_is_refused_and_recorded(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    at(checkpoint, asked, 600)  # the deadline itself is too late
    got = approve(checkpoint, run, asked.decision_id)
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "approval_timed_out")
    assert not got.approval_token
    act = checkpoint.records()[-1]
    assert (act["action"], act["code"], act["decision_id"]) == ("approval", "approval_timed_out",
                                                                got.decision.decision_id)
    # a rejection after it is too late as well: nothing about the call changes now
    rejected = checkpoint.stub(PERSON_TOKEN).Reject(pb.RejectRequest(run_id=run.run_id,
                                                                     decision_id=asked.decision_id), timeout=5)
    assert rejected.decision.code == "approval_timed_out"


def test_an_approval_just_before_the_deadline_still_works(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    at(checkpoint, asked, 599.999)
    token = approve(checkpoint, run, asked.decision_id).approval_token
    assert token
    got = checkpoint.stub().Check(call(run, asked.decision_id, token), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_ALLOW, "allowed") and got.HasField("grant")


def test_an_approval_token_presented_after_the_deadline_is_refused_and_recorded(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    at(checkpoint, asked, 10)
    token = approve(checkpoint, run, asked.decision_id).approval_token
    at(checkpoint, asked, 600)  # the token itself lives an hour: the deadline ends it sooner
    got = checkpoint.stub().Check(call(run, asked.decision_id, token), timeout=5)
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "approval_timed_out", "approval")
    assert not got.HasField("grant")
    assert checkpoint.records()[-1]["code"] == "approval_timed_out"


def test_the_drivers_expiry_is_recorded_once_the_deadline_passed_and_never_before(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    at(checkpoint, asked, 599)
    early = expire(checkpoint, run, asked.decision_id)
    assert (early.verdict, early.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert "has not passed" in early.reason
    at(checkpoint, asked, 601)
    done = expire(checkpoint, run, asked.decision_id)
    assert (done.verdict, done.code) == (pb.VERDICT_ALLOW, "recorded"), done.reason
    record = checkpoint.records()[-1]
    assert (record["action"], record["run_id"]) == ("expire", run.run_id)
    assert record["arguments"]["details"]["decision_id"] == asked.decision_id
    again = expire(checkpoint, run, asked.decision_id)  # sent again after a restart: it stands
    assert again.verdict == pb.VERDICT_ALLOW
    # the expiry took the approval's single-use key: even a clock set back spends no approval now
    at(checkpoint, asked, 1)
    token = approve(checkpoint, run, asked.decision_id)
    assert (token.decision.verdict, token.decision.code) == (pb.VERDICT_DENY, "approval_invalid")


def test_an_expiry_cannot_undo_a_spent_approval_nor_name_another_runs_decision(start, policy_dir):
    with_timeout(policy_dir, 600)
    checkpoint = start()
    run, other = checkpoint.start_run("recon"), checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    token = approve(checkpoint, run, asked.decision_id).approval_token
    assert checkpoint.stub().Check(call(run, asked.decision_id, token), timeout=5).verdict == pb.VERDICT_ALLOW
    at(checkpoint, asked, 601)
    late = expire(checkpoint, run, asked.decision_id)
    assert (late.verdict, late.code) == (pb.VERDICT_DENY, "approval_invalid") and "settled" in late.reason
    foreign = expire(checkpoint, other, ask(checkpoint, run).decision_id)  # another run's ask
    assert (foreign.verdict, foreign.code) == (pb.VERDICT_DENY, "approval_invalid")
    named = expire(checkpoint, run, asked.decision_id, person="alice")  # an expiry is nobody's act
    assert (named.verdict, named.code) == (pb.VERDICT_DENY, "invalid_request")
    assert checkpoint.records()[-1]["code"] == "invalid_request"  # refusals are on the record too


def test_the_shortest_timeout_of_the_rules_asked_stands(policy_dir):
    from checkpoint.server.approvals import approval_timeout

    with_timeout(policy_dir, 600)
    policies = load_policy_dir(policy_dir)
    assert approval_timeout(policies, ["rule:wide-scans-need-approval", "rule:plans-read-first"]) == 600
    assert approval_timeout(policies, ["rule:plans-read-first"]) == 24 * 3600
    assert approval_timeout(policies, ["rule:no-such-rule"]) == 24 * 3600
