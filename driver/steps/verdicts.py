"""A call the checkpoint did not simply allow: refused (DENY), waiting for a person
(REQUIRE_APPROVAL), or halted (HALT, or a verdict this driver does not know: fail closed the
same way), which refuses the rest of the turn and pauses the run. And a person's approval
attached to the call's next check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver import checks
from driver.runs.model import AWAITING_APPROVAL, RUNNING, EventKind, Run
from driver.steps.ends import pause_run
from warden.checkpoint.v1 import checkpoint_pb2 as cp

if TYPE_CHECKING:
    from driver.loop import Driver
    from driver.runs.store import RunStore


def attach_approval(store: RunStore, req: cp.CheckRequest, call: dict[str, Any]) -> None:
    if call["status"] == "approved":
        approval = store.approval(call["approval_id"])
        req.approval.CopyFrom(cp.Approval(decision_id=approval.decision_id, token=approval.token))


def not_allowed(driver: Driver, run: Run, call: dict[str, Any], resp: cp.CheckResponse) -> bool:
    """DENY, REQUIRE_APPROVAL or HALT of a call; False when the run stops advancing."""
    store = driver.store
    if resp.verdict == checks.DENY:
        checks.refuse(store, run, call, resp.code, resp.reason, decision_id=resp.decision_id)
        return True
    if resp.verdict == checks.APPROVAL:
        approval_id = store.add_approval(run_id=run.run_id, call=call["id"], decision_id=resp.decision_id,
                                         tool=call["tool"], arguments=call["arguments"], code=resp.code,
                                         rule=resp.rule, reason=resp.reason, deadline=checks.deadline_of(resp))
        store.update_call(call["id"], status="awaiting_approval", approval_id=approval_id,
                          decision_id=resp.decision_id, verdict="REQUIRE_APPROVAL", code=resp.code)
        # only from running: a pause that landed during the check stands (resume waits again)
        store.transition(run.run_id, RUNNING, AWAITING_APPROVAL, resp.code, resp.reason)
        store.append_event(run.run_id, EventKind.APPROVAL_REQUESTED, approval_id=approval_id, tool=call["tool"],
                           arguments=call["arguments"], rule=resp.rule, reason=resp.reason)
        return False
    # HALT (or a verdict this driver does not know: fail closed the same way): a breaker, or a
    # handoff_if rule that gives the case to a person or queue; either way the run pauses
    handoff = resp.code == "handoff"
    breaker = resp.code.removeprefix("breaker_")
    why = "the case was handed to a person earlier in this turn" if handoff else \
        f"breaker {breaker} tripped earlier in this turn"
    checks.refuse(store, run, call, resp.code, resp.reason, failure=False, stop=True, verdict="HALT",
                  decision_id=resp.decision_id)
    for other in store.calls(run.run_id, run.turn):
        if other["status"] != "done":
            checks.refuse(store, run, other, resp.code, why, failure=False, stop=True, verdict="HALT")
            store.append_event(run.run_id, EventKind.CALL_REFUSED, tool=other["tool"], code=resp.code)
    pause_run(driver, store.run(run.run_id), resp.code, resp.reason, **checks.halted(resp))
    return False
