"""A run as a DBOS workflow, for drivers that share a PostgreSQL store.

The workflow (`drive_run`) looks at the run and, while it is running, takes it one step further
per DBOS step: a model turn, one call checked and executed, or the conclusion (Driver.advance
with one_call). Every step commits its effects in the run store as before, so a step that re-runs
on another driver (its driver died before DBOS recorded it) continues from what was committed: a
call already granted is sent again with the same grant, which the toolrunner answers with the
stored receipt; a turn whose calls are stored is not asked for again.

Waits are durable: a run awaiting approval waits in `DBOS.recv` until a person's act wakes it or
the wait's deadline passes (decided once when the wait starts and recorded as the run's
`approval_wait` event, waits.py, so a takeover keeps it), and an approval that times out is
rejected (a refusal, recorded as the run's `approval_decided` event by `warden`); a paused run,
or one awaiting a child, waits in `recv` for a wake (what Driver.spawn sends after a person's act
at any driver). A driver that takes a workflow over wakes it once, so an act recorded while no
driver held the run is seen at once. Cancel is
`DBOS.cancel_workflow`; pause keeps warden's own `paused` status, the workflow waits meanwhile.

RUN_MODEL_VERSION is the workflows' application version. DBOS recovers a workflow only on an
executor of the same version, so it changes only when the step sequence of `drive_run` changes;
a deploy that changes it keeps one driver of the old version until its runs drain.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any

from dbos import DBOS, SetWorkflowID

from driver.durable import waits
from driver.durable.holders import Holder, holders, runs_held_by
from driver.durable.leases import DEFAULT_TTL_SECONDS, Leases, application_name, new_executor_id
from driver.runs.model import AWAITING_APPROVAL, RUNNING, TERMINAL
from warden.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from driver.loop import Driver
    from warden.store.pg import Database

log = logging.getLogger("warden.driver.durable")

RUN_MODEL_VERSION = "warden-run-1"  # change only with the step sequence of drive_run (see above)
DBOS_SCHEMA = "dbos"  # DBOS's own tables, beside warden's in the same database
WAKE = "wake"
WAIT_SECONDS = 300.0  # a waiting run looks again this often even without a wake
RETRY_SECONDS = 1.0  # a run held elsewhere or a store away: look again after this
DEFAULT_APPROVAL_TIMEOUT_SECONDS = 24 * 3600.0
_PENDING = ("PENDING", "ENQUEUED")
STORE_UNAVAILABLE = "store_unavailable"  # what a step says instead of raising: a raise ends the workflow

_engine: DurableRuns | None = None  # one per process: DBOS is a process-wide singleton


def workflow_id(run_id: str) -> str:
    return f"run:{run_id}"


def _driver() -> Driver:
    if _engine is None:
        raise RuntimeError("no durable runs engine in this process")
    return _engine.driver


@DBOS.step(name="warden.look")
def look(run_id: str) -> dict[str, Any]:
    """The run's status and, awaiting approval, the deadline of its pending approval."""
    d = _driver()
    seen: dict[str, Any] = {"status": "", "approval_id": "", "left": 0.0}
    try:
        run = d.store.run(run_id)
        seen["status"] = str(run.status)
        if run.status == AWAITING_APPROVAL:
            for a in d.store.approvals(run_id, status="pending"):
                # the deadline is decided once and kept in the run's log (waits.py), and what is
                # left of it is taken inside this step, so it is recorded: a replay on another
                # driver takes the same path, and a driver taking the run over keeps the deadline
                wait = waits.begin(d.store, a, _engine_approval_timeout())
                seen.update(approval_id=a.approval_id, left=wait.deadline - time.time())
                break
    except StoreUnavailable as exc:  # a step that raised would end the workflow: look again later
        log.warning("run %s waits for the store: %s", run_id, exc)
        seen["status"] = STORE_UNAVAILABLE
    return seen


def _engine_approval_timeout() -> float:
    return _engine.approval_timeout if _engine is not None else DEFAULT_APPROVAL_TIMEOUT_SECONDS


@DBOS.step(name="warden.advance")
def advance(run_id: str) -> str:
    """One step of a running run: what it was, `held` (another driver still holds the run's lock:
    a driver judged dead whose session has not ended yet) or `store_unavailable`."""
    d = _driver()
    try:
        with d.store.driving(run_id) as mine:
            if not mine:
                return "held"
            run = d.store.run(run_id)
            if run.status != RUNNING:
                return "not_running"
            try:
                return d.advance(run, one_call=True)
            except StoreUnavailable:
                raise
            except Exception as exc:  # noqa: BLE001 - a bug must pause the run, never leave it "running"
                log.exception("run %s: unexpected error", run_id)
                d._pause(d.store.run(run_id), "driver_error", f"{type(exc).__name__}: {exc}")
                return "paused"
    except StoreUnavailable as exc:
        log.warning("run %s waits for the store: %s", run_id, exc)
        return STORE_UNAVAILABLE


@DBOS.step(name="warden.approval_timed_out")
def approval_timed_out(run_id: str, approval_id: str) -> str:
    """The approval's deadline passed with no decision: a refusal, recorded like a person's."""
    from driver.approval_deadlines import expire
    from driver.errors import DriverError, RunStateError

    d = _driver()
    try:
        approval = d.store.approval(approval_id)
        if approval.deadline and approval.deadline <= time.time():
            # the checkpoint's deadline: its expiry on the record, as DeadlineWatch would write it
            try:
                return "expired" if expire(d, approval, spawn=False) is not None else "decided"
            except DriverError as exc:  # not recorded yet (the checkpoint's clock is behind): look again
                log.info("approval %s: its expiry waits (%s)", approval_id, exc.code)
                return STORE_UNAVAILABLE
        wait = waits.recorded(d.store, run_id, approval_id)
        timeout = wait.timeout_seconds if wait is not None and wait.timeout_seconds else _engine_approval_timeout()
        d.reject(approval_id, "warden", f"approval_timeout: no decision within {timeout:g}s", spawn=False)
    except RunStateError as exc:  # decided or cancelled meanwhile: that stands
        return exc.code
    except StoreUnavailable:  # looked at again: the deadline has still passed
        return STORE_UNAVAILABLE
    return "rejected"


@DBOS.workflow(name="warden.run")
def drive_run(run_id: str) -> str:
    while True:
        seen = look(run_id)
        status = seen["status"]
        if status in TERMINAL:
            return str(status)
        if status == STORE_UNAVAILABLE:
            DBOS.sleep(RETRY_SECONDS)
            continue
        if status == RUNNING:
            if advance(run_id) in ("held", STORE_UNAVAILABLE):
                DBOS.sleep(RETRY_SECONDS)
            continue
        if status == AWAITING_APPROVAL and seen["approval_id"]:
            if seen["left"] <= 0:
                if approval_timed_out(run_id, seen["approval_id"]) == STORE_UNAVAILABLE:
                    DBOS.sleep(RETRY_SECONDS)
            else:
                DBOS.recv(WAKE, timeout_seconds=min(seen["left"], WAIT_SECONDS))
            continue
        DBOS.recv(WAKE, timeout_seconds=WAIT_SECONDS)  # paused, awaiting a child: a person's act wakes it


class DurableRuns:
    """The DBOS engine of one driver process and its lease watch."""

    def __init__(self, driver: Driver, db: Database, *, executor_id: str = "",
                 lease_ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 approval_timeout_seconds: float = DEFAULT_APPROVAL_TIMEOUT_SECONDS,
                 on_fenced: Any = None) -> None:
        self.driver = driver
        self.db = db
        self.executor_id = executor_id or new_executor_id()
        self.approval_timeout = approval_timeout_seconds
        self._on_fenced = on_fenced or _exit_fenced
        self.leases = Leases(db, self.executor_id, RUN_MODEL_VERSION, ttl_seconds=lease_ttl_seconds,
                             recover=self.recover_executor, on_fenced=self._fenced)
        self._launched = False
        self._left: dict[str, int] = {}  # what recovery left of each dead executor, last pass
        self.taken_over = 0  # workflows of dead drivers recovered here (warden_driver_runs_taken_over_total)

    def launch(self) -> None:
        """Start DBOS (it creates or migrates its schema `dbos` at launch) and the lease watch."""
        global _engine
        import psycopg
        import sqlalchemy as sa

        url = self.db.url
        kwargs: dict[str, Any] = {"application_name": application_name("dbos", self.executor_id),
                                  "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
                                  "keepalives_count": 3, "connect_timeout": 10}
        if url.password is not None:
            kwargs["password"] = url.password
        # DBOS gets an engine, not a URL: the password stays out of anything DBOS might print
        engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url.conninfo, **kwargs),
                                  pool_size=10, pool_pre_ping=True)
        _engine = self
        DBOS(config={"name": "warden-driver", "system_database_engine": engine, "dbos_system_schema": DBOS_SCHEMA,
                     "executor_id": self.executor_id, "application_version": RUN_MODEL_VERSION,
                     "notification_listener_polling_interval_sec": 0.2, "log_level": "WARNING"})
        DBOS.launch()
        self.driver.durable = self
        self.leases.start()
        self._launched = True

    def _fenced(self) -> None:
        self.driver._stopping.set()
        self._on_fenced()

    def recover_executor(self, executor_id: str) -> int:
        """Take over a dead executor's workflows of this version; how many of it are left pending."""
        handles = DBOS._recover_pending_workflows([executor_id])  # private: dbos is pinned
        for handle in handles:
            wid = handle.get_workflow_id()
            self.taken_over += 1
            log.warning("took over %s from dead driver %s", wid, executor_id)
            # a recovered wait replays its `recv` to the end of the dead driver's timer: a person's
            # act recorded while nobody held the run sent no message, so look at the run now
            DBOS.send(wid, "takeover", topic=WAKE)
        left = DBOS.list_workflows(status="PENDING", executor_id=executor_id)
        if not handles and self._left.get(executor_id) == len(left):
            return len(left)  # retried every beat: say it again only when something changed
        self._left[executor_id] = len(left)
        log.warning("driver %s is dead: %d runs recovered here; %d left (run model versions %s)", executor_id,
                    len(handles), len(left), sorted({w.app_version or "" for w in left}))
        return len(left)

    def holders(self, run_ids: list[str]) -> dict[str, Holder]:
        """Who holds each of these runs (their open workflows), by run id."""
        return holders(self.db, run_ids, self.leases.ttl, DBOS_SCHEMA)

    def runs_held(self) -> int:
        """How many open workflows this driver holds under its lease."""
        return runs_held_by(self.db, self.executor_id, DBOS_SCHEMA)

    def start(self, run_id: str) -> None:
        """Start the run's workflow, or wake it wherever it is (a person's act at any driver)."""
        wid = workflow_id(run_id)
        status = DBOS.get_workflow_status(wid)
        if status is None:
            with SetWorkflowID(wid):
                DBOS.start_workflow(drive_run, run_id)
        elif status.status in _PENDING:
            DBOS.send(wid, "wake", topic=WAKE)
        elif self.driver.store.run(run_id).status not in TERMINAL:
            DBOS.resume_workflow(wid)  # cancelled or failed while its run goes on: from its last step

    def adopt(self, run_id: str) -> bool:
        """Start a workflow for a running run that has none (started before this engine ran)."""
        if DBOS.get_workflow_status(workflow_id(run_id)) is not None:
            return False
        self.start(run_id)
        return True

    def cancel(self, run_id: str) -> None:
        if DBOS.get_workflow_status(workflow_id(run_id)) is not None:
            DBOS.cancel_workflow(workflow_id(run_id))

    def stop(self) -> None:
        self.leases.stop()
        if self._launched:
            DBOS.destroy(destroy_registry=False)


def _exit_fenced() -> None:
    # The runs of a fenced driver are already driven elsewhere: stop the whole process at once,
    # before any thread of it takes another step (a supervisor starts it again with a new id).
    logging.shutdown()
    os._exit(3)


__all__ = ["RUN_MODEL_VERSION", "DurableRuns", "drive_run", "workflow_id"]
