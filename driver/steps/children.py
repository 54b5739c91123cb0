"""A delegation's child run seen from its parent: whether the parent waits for it, and its
outcome handed to the parent's call once it ends."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver import checks, context
from driver.runs.model import AWAITING_CHILD, RUNNING, SUCCEEDED, TERMINAL, EventKind, Run

if TYPE_CHECKING:
    from driver.loop import Driver


def child_done(driver: Driver, run: Run, call: dict[str, Any]) -> bool:
    """A delegation call whose child was started: False while the run must wait for the child."""
    store = driver.store
    if not store.has_run(call["child_run_id"]):
        checks.refuse(store, run, call, "child_not_started", "the driver stopped before the child run "
                      "was created; nothing ran for this delegation", decision_id=call["decision_id"])
        return True
    child = store.run(call["child_run_id"])
    if child.status not in TERMINAL:
        store.wait_for_child(run.run_id, call["id"], f"waiting for child run {child.run_id} ({child.agent})")
    # Looked at again after the wait began: a child that ended in between is settled
    # here, or by its own worker, which then wakes this run.
    child = store.run(child.run_id)
    if child.status in TERMINAL:
        settle_child(driver, child)
        return True
    return False


def settle_child(driver: Driver, child: Run) -> None:
    """A child run ended: its outcome becomes the parent's call result, and the parent goes on."""
    store = driver.store
    with driver._settling:  # the child's worker and a cancel or recover may both get here
        call = store.call_for_child(child.run_id)
        if call is None or call["status"] == "done":
            return
        ok = child.status == SUCCEEDED
        summary = child.reason or child.code
        if child.missing:
            summary += "\nCriteria not met: " + "; ".join(child.missing)
        store.update_call(call["id"], status="done",
                          result={"is_error": not ok, "content": context.child_result(child, summary)})
        parent_id = call["run_id"]
        checks.count_outcome(store, parent_id, ok)
        store.append_event(parent_id, EventKind.CHILD_ENDED, child_run_id=child.run_id, agent=child.agent,
                           status=child.status, code=child.code, reason=child.reason)
        # Waiting: it goes on. Still running (it had not begun to wait): its worker looks again.
        woken = store.transition(parent_id, AWAITING_CHILD, RUNNING, "", "")
        if woken or store.run(parent_id).status == RUNNING:
            driver.spawn(parent_id)
