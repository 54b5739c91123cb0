"""A run stops advancing: paused for a person, or ended. The checkpoint's record of it comes
first; a move that loses a race (a cancel landed meanwhile) is corrected there, and that end
stands."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver import learnings
from driver.run_ends import correct_end, record_end
from driver.runs.model import FAILED, PAUSED, Run, RunStatus
from driver.steps.children import settle_child
from warden.checkpoint.v1 import checkpoint_pb2 as cp

if TYPE_CHECKING:
    from driver.loop import Driver


def pause_run(driver: Driver, run: Run, code: str, reason: str, **extra: Any) -> None:
    record_end(driver.checkpoint, driver.store, run.run_id, PAUSED, code, reason)  # on the record first
    if not driver.store.set_status_logged(run.run_id, PAUSED, code, reason, **extra):
        correct_end(driver.checkpoint, driver.store, run.run_id, PAUSED)


def finish_run(driver: Driver, run: Run, status: RunStatus, code: str, reason: str, **extra: Any) -> None:
    store = driver.store
    record_end(driver.checkpoint, store, run.run_id, status, code, reason)  # on the record first
    if not store.set_status_logged(run.run_id, status, code, reason, **extra):
        correct_end(driver.checkpoint, store, run.run_id, status)
        return  # it ended otherwise meanwhile (a cancel): that end stands
    if status == FAILED:  # a failed run becomes a proposed learning
        learnings.report(driver, run, cp.LEARNING_SOURCE_RUN_FAILED, code, f"the run failed ({code}): {reason}")
    if run.parent_run_id:
        settle_child(driver, store.run(run.run_id))
