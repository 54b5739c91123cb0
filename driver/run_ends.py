"""A run's end on the checkpoint's record: how each run ended (or paused for a person), with the
tokens and turns it used, so the per-version statistics can be computed from the record alone
(docs/audit.md, "A run's end").

The end is recorded before the run's new status is written, like a person's acts. It is never
refused by the driver's own rules: a run that must stop stops, so an end the checkpoint cannot
record (unreachable, the log failing, a refusal) becomes an `act_unrecorded` event on the run and
a warning in the driver's log, never a run that keeps going. When the status write then loses a
race (a cancel landed first, or the loop finished first), the end recorded is corrected by a
second one with the status that won and `instead_of` the one claimed: the last end of a run is
its outcome.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from driver.runs.model import EventKind
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import to_struct

if TYPE_CHECKING:
    from driver.clients import CheckpointClient
    from driver.runs.store import RunStore

log = logging.getLogger("warden.driver.ends")

END_ACT = "end"
# the statuses an end may carry: the terminal ones, and paused (the run waits for a person)
END_STATUSES = frozenset({"succeeded", "failed", "cancelled", "paused"})


def record_end(checkpoint: CheckpointClient, store: RunStore, run_id: str, status: str, code: str, reason: str,
               *, instead_of: str = "") -> bool:
    """Record that `run_id` ends (or pauses) with `status` and `code`; False (and an event) when
    the checkpoint did not record it. Never raises: the run stops either way."""
    try:
        run = store.run(run_id)
        details: dict[str, object] = {"status": status, "code": code[:64], "tokens": run.total_tokens or 0,
                                      "turns": run.total_turns or 0}
        if instead_of:
            details["instead_of"] = instead_of
        request = cp.RecordActRequest(run=cp.RunContext(run_token=run.run_token), act=END_ACT,
                                      note=reason[:1000], details=to_struct(details))
        decision = checkpoint.record_act(request)
        problem = "" if decision.verdict == cp.VERDICT_ALLOW else f"{decision.code}: {decision.reason}"
    except Exception as exc:  # noqa: BLE001 - unreachable, refused, or a bug: the run stops all the same
        problem = str(exc) or type(exc).__name__
    if not problem:
        return True
    log.warning("run %s: its end (%s, %s) is not on the checkpoint's record: %s", run_id, status, code, problem)
    try:
        store.append_event(run_id, EventKind.ACT_UNRECORDED, act=END_ACT, status=status, code=code, problem=problem[:500])
    except Exception:  # noqa: BLE001 - the warning above is what is left
        log.exception("run %s: the act_unrecorded event could not be written either", run_id)
    return False


def correct_end(checkpoint: CheckpointClient, store: RunStore, run_id: str, claimed: str) -> None:
    """The status write after an end with status `claimed` did not happen (the run ended, or was
    paused, otherwise meanwhile): record the status that stands, so the last end is the truth."""
    try:
        run = store.run(run_id)
    except Exception:  # noqa: BLE001
        log.exception("run %s: cannot read the run to correct its end", run_id)
        return
    if run.status in END_STATUSES:
        record_end(checkpoint, store, run_id, run.status, run.code or run.status, run.reason or "",
                   instead_of=claimed)
