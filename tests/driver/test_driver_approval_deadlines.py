"""A run waiting for an approval is told when its deadline passes: the expiry on the checkpoint's
record first, then the call refused to the model (`approval_timed_out`) and the run going on; a
model call that waited pauses the run. The checkpoint's clock decides, not the driver's. Clocks are
shifted, never waited for."""

from __future__ import annotations

import time

from driver_harness import PLAN, call, final

from driver.approval_deadlines import expire_due

WIDE = "name: wide-scans-need-approval\n"


def ten_minutes(policy_dir, checkpoint_server) -> None:
    rules = policy_dir / "rules" / "recon.yaml"
    rules.write_text(rules.read_text().replace(WIDE, WIDE + "approval_timeout_seconds: 600\n"))
    assert checkpoint_server.store.reload()


def checkpoint_at(checkpoint_server, offset: float) -> None:
    checkpoint_server.service.approvals.wall = lambda: time.time() + offset


def expiries(checkpoint_server, run_id: str) -> list[dict]:
    return [r for r in checkpoint_server.log.read(run_id=run_id) if r["action"] == "expire"]


def waiting(stack, d, tail):
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="10.20.0.0/24"), *tail])
    assert run.status == "awaiting_approval"
    [approval] = d.store.approvals(run.run_id, status="pending")
    return run, approval


def test_a_deadline_passed_refuses_the_call_tells_the_run_and_is_recorded(stack, policy_dir, checkpoint_server):
    ten_minutes(policy_dir, checkpoint_server)
    d = stack.driver()
    run, approval = waiting(stack, d, [{"action": "handoff", "reason": "the scan was refused"}])
    assert 599 < approval.deadline - time.time() <= 600  # the deadline the checkpoint's answer named
    assert expire_due(d, now=approval.deadline - 1, spawn=False) == []  # not yet: nothing happens
    checkpoint_at(checkpoint_server, 601)
    [told] = expire_due(d, now=approval.deadline + 1, spawn=False)
    assert told.run_id == run.run_id and told.status == "running"
    assert d.store.approval(approval.approval_id).status == "expired"
    [record] = expiries(checkpoint_server, run.run_id)
    assert (record["verdict"], record["code"]) == ("ALLOW", "recorded")
    assert record["arguments"]["details"]["decision_id"] == approval.decision_id
    decided = [e.data for e in d.store.events(run.run_id) if e.kind == "approval_decided"]
    assert decided[-1]["decision"] == "expired" and decided[-1]["code"] == "approval_timed_out"
    run = d.run_until_stopped(run.run_id)
    results = [e for e in d.store.transcript(run.run_id) if e["role"] == "results"]
    assert "approval_timed_out" in results[-1]["results"][0]["content"]  # the model was told
    assert d.store.receipts(run.run_id) == []  # and nothing ran
    assert expire_due(d, now=approval.deadline + 2, spawn=False) == []  # once


def test_the_drivers_clock_alone_refuses_nothing(stack, policy_dir, checkpoint_server):
    """A driver whose clock runs ahead: the checkpoint refuses the early expiry, so the approval
    stays pending and a person's answer still counts."""
    ten_minutes(policy_dir, checkpoint_server)
    d = stack.driver()
    run, approval = waiting(stack, d, [final(reported="ok")])
    assert expire_due(d, now=approval.deadline + 3600, spawn=False) == []
    assert d.store.approval(approval.approval_id).status == "pending"
    assert d.store.run(run.run_id).status == "awaiting_approval"
    assert expiries(checkpoint_server, run.run_id)[-1]["code"] == "approval_invalid"  # the refusal is recorded
    d.approve(approval.approval_id, "bob", "fine", spawn=False,
              approval_token=stack.approval_token(d, approval.approval_id))
    assert d.store.approval(approval.approval_id).status == "approved"


def test_an_approval_given_before_the_deadline_is_not_expired(stack, policy_dir, checkpoint_server):
    ten_minutes(policy_dir, checkpoint_server)
    d = stack.driver()
    run, approval = waiting(stack, d, [final(reported="ok")])
    d.approve(approval.approval_id, "bob", "fine", spawn=False,
              approval_token=stack.approval_token(d, approval.approval_id))
    checkpoint_at(checkpoint_server, 601)
    assert expire_due(d, now=approval.deadline + 1, spawn=False) == []
    assert d.store.approval(approval.approval_id).status == "approved" and expiries(checkpoint_server, run.run_id) == []


def test_a_model_call_whose_deadline_passed_pauses_the_run(stack, policy_dir, checkpoint_server):
    (policy_dir / "rules" / "models.yaml").write_text(
        "kind: Rule\nname: model-calls-are-read-first\neffect: approve_if\nactions: [model_call]\n"
        "condition: 'counters.total_turns == 0'\napproval_timeout_seconds: 60\n")
    assert checkpoint_server.store.reload()
    d = stack.driver()
    run = stack.start(d, [PLAN, final(reported="ok")])
    [approval] = d.store.approvals(run.run_id, status="pending")
    checkpoint_at(checkpoint_server, 61)
    [told] = expire_due(d, now=approval.deadline + 1, spawn=False)
    assert (told.status, told.code) == ("paused", "approval_timed_out") and told.total_turns == 0
