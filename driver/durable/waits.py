"""When a durable run's approval wait ends: decided once, when the wait starts, and recorded.

The first driver that sees a run waiting for an approval fixes the wait's deadline (the earlier
of the approval's creation plus that driver's approval timeout, and the checkpoint's own
deadline for the approval) and appends it to the run's log as an `approval_wait` event. Every
later look, on that driver or on one that took the run over after a crash, reads the deadline
back from that event: a takeover never restarts the clock, not even on a driver configured with
another timeout, and the refusal when it passes names the timeout the wait started with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from driver.runs.model import EventKind

if TYPE_CHECKING:
    from driver.runs.model import Approval
    from driver.runs.store import RunStore

_PAGE = 1000


@dataclass(frozen=True)
class Wait:
    approval_id: str
    deadline: float  # seconds since the epoch
    timeout_seconds: float  # the driver's approval timeout the wait started with


def recorded(store: RunStore, run_id: str, approval_id: str) -> Wait | None:
    """The wait on `approval_id` as the run's log has it, or None before it started."""
    after = 0
    while True:
        events = store.events(run_id, after_seq=after, limit=_PAGE)
        for e in events:
            if e.kind == EventKind.APPROVAL_WAIT and e.data.get("approval_id") == approval_id:
                return Wait(approval_id, float(e.data["deadline"]), float(e.data.get("timeout_seconds") or 0))
        if len(events) < _PAGE:
            return None
        after = events[-1].seq


def begin(store: RunStore, approval: Approval, timeout_seconds: float) -> Wait:
    """The wait on `approval`: the one recorded, or (the first time) one decided now and recorded.

    The driver driving the run's workflow calls this, and a step that re-runs after a crash finds
    the event its first attempt committed. During a takeover the old driver may still be running,
    so two drivers can both find nothing and both append: each reads the log again after its
    append, and the first event on the log is the wait for both."""
    found = recorded(store, approval.run_id, approval.approval_id)
    if found is not None:
        return found
    deadline = approval.created_at + timeout_seconds
    if approval.deadline:  # the checkpoint named one in its answer: the earlier wins
        deadline = min(deadline, approval.deadline)
    store.append_event(approval.run_id, EventKind.APPROVAL_WAIT, approval_id=approval.approval_id,
                       deadline=deadline, timeout_seconds=timeout_seconds,
                       checkpoint_deadline=approval.deadline or None)
    return recorded(store, approval.run_id, approval.approval_id) or Wait(approval.approval_id, deadline,
                                                                          timeout_seconds)
