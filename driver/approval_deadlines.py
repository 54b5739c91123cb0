"""A run waiting for an approval is told when the approval's deadline passes, rather than waiting
forever: the expiry goes on the checkpoint's record first (RecordAct `expire`, which the checkpoint
accepts only once its own clock says the deadline passed, and which takes the approval's
single-use key, so no late approval is spent), then the call is refused to the model as data
(`approval_timed_out`, counted as a failure like a rejection) and the run goes on; a model call
that waited pauses the run for a person, as a rejected one does.

`DeadlineWatch` looks every few seconds (an approval names its deadline in the checkpoint's
answer). An expiry the checkpoint cannot record now is looked at again next time: nothing is
refused that is not on the record. A person's answer that lands meanwhile wins: the approval is
moved from `pending` once, by whichever comes first.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from driver import checks, context
from driver.errors import DriverError
from driver.record import record_act
from driver.run_ends import correct_end, record_end
from driver.runs.model import AWAITING_APPROVAL, PAUSED, RUNNING, ApprovalStatus, EventKind, Run

if TYPE_CHECKING:
    from driver.loop import Driver
    from driver.runs.model import Approval

log = logging.getLogger("warden.driver.approvals")

TIMED_OUT = "approval_timed_out"
DEFAULT_INTERVAL = 5.0


def expire_due(driver: Driver, now: float | None = None, *, spawn: bool = True) -> list[Run]:
    """Expire every pending approval whose deadline passed; the runs told, as they are now."""
    moment = time.time() if now is None else now
    told = []
    for approval in driver.store.approvals(status=ApprovalStatus.PENDING):
        if not approval.deadline or approval.deadline > moment:
            continue
        try:
            run = expire(driver, approval, spawn=spawn)
        except DriverError as exc:  # not recorded (unreachable, or the checkpoint's clock is behind): next time
            log.info("approval %s: its expiry waits (%s: %s)", approval.approval_id, exc.code, exc.message)
            continue
        if run is not None:
            told.append(run)
    return told


def expire(driver: Driver, approval: Approval, *, spawn: bool = True) -> Run | None:
    """Record the expiry of `approval`, refuse its call and tell its run; None when a person
    answered it meanwhile. Raises DriverError when the checkpoint did not record it."""
    store = driver.store
    run = store.run(approval.run_id)
    record_act(driver, run, "expire", "", "", decision_id=approval.decision_id)
    reason = (f"nobody answered the approval of this call before its deadline "
              f"({time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(approval.deadline))}): it is refused")
    try:
        store.decide_approval(approval.approval_id, ApprovalStatus.EXPIRED, "", "deadline passed")
    except DriverError:
        return None  # a person (or a cancel) settled it first; the checkpoint's key decides what can be spent
    model_call = approval.tool == checks.MODEL_CALL_APPROVAL
    if not model_call:
        store.update_call(approval.call, status="done", verdict="DENY", code=TIMED_OUT,
                          result={"content": context.refusal_result(TIMED_OUT, reason), "is_error": True})
        store.add_to_run(run.run_id, consecutive_failures=1)
    store.append_event(run.run_id, EventKind.APPROVAL_DECIDED, approval_id=approval.approval_id,
                       decision=ApprovalStatus.EXPIRED.value, person="", note=reason, tool=approval.tool,
                       code=TIMED_OUT)
    if model_call:  # without the model the run cannot go on: it waits for a person
        record_end(driver.checkpoint, store, run.run_id, PAUSED, TIMED_OUT, reason)
        if store.transition(run.run_id, AWAITING_APPROVAL, PAUSED, TIMED_OUT, reason):
            store.append_event(run.run_id, EventKind.RUN_PAUSED, code=TIMED_OUT, reason=reason)
        else:
            correct_end(driver.checkpoint, store, run.run_id, PAUSED)
    elif store.transition(run.run_id, AWAITING_APPROVAL, RUNNING, "", "") and spawn:
        driver.spawn(run.run_id)  # the model reads the refusal and goes on
    return store.run(run.run_id)


class DeadlineWatch:
    """Looks for approvals past their deadline every `interval` seconds, in a thread of its own."""

    def __init__(self, driver: Driver, interval: float = DEFAULT_INTERVAL):
        self.driver = driver
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="driver-approval-deadlines", daemon=True)

    def start(self) -> DeadlineWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                expire_due(self.driver)
            except Exception:  # noqa: BLE001 - the store is down, say: the next look tries again
                log.exception("approval deadlines could not be looked at")

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
