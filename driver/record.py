"""A person's act (pause, resume, amend, cancel) goes on the checkpoint's hash-chained record
before it takes effect."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver.errors import DriverError, RunStateError
from driver.runs.model import EventKind, Run
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import to_struct

if TYPE_CHECKING:
    from driver.loop import Driver


def record_act(driver: Driver, run: Run, act: str, person: str, note: str, *, required: bool = True,
               act_id: str = "", **details: Any) -> None:
    """`required`: refused or unrecorded, the act does not happen (RunStateError / the client's
    DependencyUnavailable). Otherwise (a cancel) the failure is an event and the act goes on."""
    request = cp.RecordActRequest(run=cp.RunContext(run_token=run.run_token), act=act, person=person,
                                  note=note, details=to_struct(details), act_id=act_id)
    try:
        answer = driver.checkpoint.record_act_answer(request)
        decision = answer.decision
        problem = "" if decision.verdict == cp.VERDICT_ALLOW else f"{decision.code}: {decision.reason}"
    except DriverError as exc:
        if required:
            raise
        problem = f"{exc.code}: {exc.message}"
    if not problem:
        if answer.run_token:  # a resume renewed the run's lifetime: present the new token from now on
            driver.store.update_run(run.run_id, run_token=answer.run_token)
        return
    if required:
        raise RunStateError(f"the checkpoint did not record the {act}: {problem}", code="act_not_recorded")
    driver.store.append_event(run.run_id, EventKind.ACT_UNRECORDED, act=act, person=person, problem=problem)
