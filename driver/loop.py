"""The governed loop: from a person's goal to a verified outcome, one checked step at a time.

Every model call and every tool call is decided by the checkpoint first, with the run's counters.
The loop keeps all state in the RunStore and advances in small committed steps, so a driver that
crashes and restarts continues a run from its last step (a tool call in flight is re-sent with the
same grant: the toolrunner answers a repeated grant with the stored receipt, it never runs twice).

A turn, in order (run_until_stopped): while the run is `running`, the calls the model proposed
this turn are taken first, one at a time (steps/decisions.py: checked, then executed, refused,
waiting for a person or for a child run); once they are all done, a final report under way is
concluded (steps/final.py); otherwise the model takes its next turn (steps/model_turn.py).

Statuses: running -> (awaiting_approval | awaiting_child | paused) -> running ... -> succeeded |
failed | cancelled.
A pause always carries a stable code: breaker_<name>, cut_off, handoff, no_progress,
criteria_unmet, checkpoint_unavailable, toolrunner_unavailable, audit_unavailable, model_call_denied,
runner_busy (the toolrunner stayed at its concurrency limit through every retry; the call keeps its
grant and is sent again on resume), paused (a person paused the run), parent_paused (a person
paused an ancestor: the run resumes with it).

A person's pause lands between steps: the worker checks the status before each step, so a step
under way (a model call, a tool call the checkpoint allowed) finishes and is kept, and the worker
moves a run to awaiting_approval only from running, so a pause that landed during a check stands.

Delegation (steps/delegation.py): a child run pinned to the version the checkpoint chose; the
parent waits for it, and its outcome becomes the result of the parent's call. Cancelling a parent
cancels its children, pausing a parent pauses its active children, and they resume with it. Every
model turn is also counted in each run above (its descendant turns), so turn ceilings bound a
whole subtree.

Drivers that share a store (PostgreSQL) drive each run one at a time: a run's worker drives it
only while the store says this driver holds it (RunStore.driving), and looks at it once more after
letting go, for a person's act at another driver may have set it going meanwhile. A store that
fails (the database gone) makes the worker wait and go on from the run's last committed step.

What a person does (start, approve, reject, resume, amend, cancel) is in person_acts.py, and
their pauses in pauses.py; this module holds the Driver and its workers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from driver import checks, pauses, person_acts
from driver.clients import CheckpointClient, ToolRunnerClient
from driver.errors import DependencyUnavailable
from driver.goal import Goal
from driver.pricing import Prices
from driver.providers.base import Provider
from driver.runs.model import (
    AWAITING_CHILD,
    PAUSED,
    RUNNING,
    EventKind,
    Run,
    RunStatus,
)
from driver.runs.store import RunStore
from driver.steps import delegation
from driver.steps.decisions import process_calls, process_first_call
from driver.steps.ends import finish_run, pause_run
from driver.steps.final import conclude
from driver.steps.model_turn import model_turn
from warden import tracing
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.store.errors import StoreUnavailable

if TYPE_CHECKING:
    from driver.durable.workflow import DurableRuns

log = logging.getLogger("warden.driver")


class Driver:
    """One driver process: a store, the two peers, and the providers runs may use."""

    def __init__(self, store: RunStore, checkpoint: CheckpointClient, toolrunner: ToolRunnerClient,
                 provider_factory: Callable[[str, str, dict[str, Any]], Provider], *,
                 prices: Prices | None = None, provider_backoff_seconds: float = 1.0,
                 runner_busy_retries: int = 4, runner_busy_backoff_seconds: float = 0.5,
                 default_provider: str = "anthropic", default_model: str = "",
                 store_retry_seconds: float = 1.0) -> None:
        self.default_provider = default_provider
        self.default_model = default_model
        self.store = store
        self.checkpoint = checkpoint
        self._token_keys: dict[str, Any] = {}  # the checkpoint's published public keys, asked on first need
        self.toolrunner = toolrunner
        self.provider_factory = provider_factory
        self.prices = prices or Prices({})
        self.provider_backoff_seconds = provider_backoff_seconds
        self.runner_busy_retries = runner_busy_retries
        self.runner_busy_backoff_seconds = runner_busy_backoff_seconds
        self.store_retry_seconds = store_retry_seconds  # a run's worker looks again after a store failure
        self._workers: dict[str, threading.Thread] = {}
        self._again: set[str] = set()  # runs whose worker must look once more before it exits
        self._lock = threading.Lock()
        self._settling = threading.Lock()
        self._stopping = threading.Event()
        # on a shared PostgreSQL store: the DBOS engine that makes each run a durable workflow
        # (driver/durable/workflow.py sets it at launch); None: runs are this process's threads
        self.durable: DurableRuns | None = None

    # -- person actions (person_acts.py, pauses.py) ------------------------------------------

    def start_run(self, agent: str, goal: Goal, *, owner: str, mode: str = "interactive",
                  provider: str = "scripted", model: str = "", provider_options: dict[str, Any] | None = None,
                  agent_version: str = "", spawn: bool = True,
                  inputs: dict[str, Any] | None = None) -> Run:
        with tracing.span("warden.run.start", {"warden.agent": agent, "warden.mode": mode}):
            return person_acts.start_run(self, agent, goal, owner=owner, mode=mode, provider=provider, model=model,
                                         provider_options=provider_options, agent_version=agent_version,
                                         spawn=spawn, inputs=inputs)

    def approve(self, approval_id: str, person: str, note: str = "", *, approval_token: str,
                spawn: bool = True) -> Run:
        """Relay a person's approval: `approval_token` is what the checkpoint's Approve gave them for
        their own credential. The driver cannot make one; the checkpoint verifies it on the call."""
        return person_acts.approve(self, approval_id, person, note, approval_token=approval_token, spawn=spawn)

    def reject(self, approval_id: str, person: str, note: str = "", *, spawn: bool = True,
               checkpoint_decision_id: str = "") -> Run:
        """A rejection narrows, so the driver may record one itself; `checkpoint_decision_id` names the
        checkpoint's record of it when the person made one there (`warden reject` does)."""
        return person_acts.decide_approval(self, approval_id, person, note, approved=False, spawn=spawn,
                                           checkpoint_decision_id=checkpoint_decision_id)

    def pause(self, run_id: str, person: str, reason: str = "") -> tuple[Run, list[Run]]:
        """A person pauses a run that is running or waiting, and every active run below it
        (code `parent_paused`); returns the run and the descendants paused."""
        return pauses.pause(self, run_id, person, reason)

    def resume(self, run_id: str, person: str, reply: str = "", raise_budget: dict[str, Any] | None = None,
               *, spawn: bool = True) -> Run:
        """A person continues a paused run: a new stretch, ceilings possibly raised, same pinned version.
        The runs its pause reached (`parent_paused`) resume with it (see resume_with_children)."""
        return self.resume_with_children(run_id, person, reply, raise_budget, spawn=spawn)[0]

    def resume_with_children(self, run_id: str, person: str, reply: str = "",
                             raise_budget: dict[str, Any] | None = None, *, spawn: bool = True,
                             with_parent: str = "") -> tuple[Run, list[Run]]:
        """resume(), and every descendant that a pause cascade holds (`parent_paused`) resumed with
        it, each act recorded under its own token naming the same person; returns the run and the
        descendants resumed. A child paused for its own reason (a breaker, a handoff, a person's
        own pause) stays paused; a descendant that could not be resumed gets a
        `child_not_resumed` event on this run and can then be resumed on its own."""
        return person_acts.resume_with_children(self, run_id, person, reply, raise_budget, spawn=spawn,
                                                with_parent=with_parent)

    def amend_goal(self, run_id: str, goal: Goal, person: str) -> int:
        return person_acts.amend_goal(self, run_id, goal, person)

    def cancel(self, run_id: str, person: str, reason: str = "") -> Run:
        run = person_acts.cancel(self, run_id, person, reason)
        if self.durable is not None:  # the run and the runs below it: their workflows stop too
            stack = [run_id]
            while stack:
                current = stack.pop()
                self.durable.cancel(current)
                stack += [c.run_id for c in self.store.children(current)]
        return run

    # -- workers --------------------------------------------------------------------------

    def spawn(self, run_id: str) -> None:
        if self.durable is not None:
            self.durable.start(run_id)  # its workflow, started or woken wherever it runs
            return
        with self._lock:
            if run_id in self._workers:
                # Its worker may be past its last look at the run: make it look once more.
                self._again.add(run_id)
                return
            t = threading.Thread(target=self._worker, args=(run_id,), name=f"run-{run_id}", daemon=True)
            self._workers[run_id] = t
            t.start()

    def _worker(self, run_id: str) -> None:
        me = threading.current_thread()
        try:
            while True:
                look_again = self._drive(run_id)
                with self._lock:
                    if not (look_again or run_id in self._again) or self._stopping.is_set():
                        # Leaving the table under the same lock as the decision to stop: a spawn
                        # after this starts a new worker, one before it made this one go on.
                        self._again.discard(run_id)
                        del self._workers[run_id]
                        return
                    self._again.discard(run_id)
        except BaseException:
            with self._lock:
                if self._workers.get(run_id) is me:
                    del self._workers[run_id]
            raise

    def _drive(self, run_id: str) -> bool:
        """Drive the run for as long as this driver holds it (the store says whether another
        driver on a shared store does: then that one drives it). Returns whether to look at the
        run again: the store was unavailable (the run goes on from its last committed step once
        the database is back, as after a restart), or the run is running again after this driver
        let it go (a person's act at another driver, whose own worker found the run still held
        by this one and left it here)."""
        try:
            with self.store.driving(run_id) as mine:
                if not mine:
                    return False
                try:
                    self.run_until_stopped(run_id)
                except StoreUnavailable:
                    raise
                except Exception as exc:  # noqa: BLE001 - a bug must pause the run, never leave it "running"
                    log.exception("run %s: unexpected error", run_id)
                    pause_run(self, self.store.run(run_id), "driver_error", f"{type(exc).__name__}: {exc}")
            return self.store.run(run_id).status == RUNNING
        except StoreUnavailable as exc:
            log.warning("run %s waits for the store: %s", run_id, exc)
            self._stopping.wait(self.store_retry_seconds)
            return True

    def recover(self) -> list[str]:
        """After a restart: continue every run that was running when the driver stopped (on a
        shared store: that no other live driver drives), and hand the outcome of any child that
        ended meanwhile to the parent waiting for it."""
        # Pauses the driver stopped in the middle of come first: stored before they were sent to
        # the checkpoint, they are recorded (once: under their own id) and applied before any
        # run goes on, parents' before the children they reach.
        pauses.apply_pauses(self, self.store.open_pauses())
        # A parent waiting for a child looks again too: the child may have ended, or its outcome
        # may be in the call already, while this driver was down.
        for parent in self.store.runs(status=AWAITING_CHILD, limit=10000):
            self.store.transition(parent.run_id, AWAITING_CHILD, RUNNING, "", "")
        # A driver stopped in the middle of a pause cascade: the runs below a person's pause are
        # held before anything goes on (a no-op for those the cascade reached).
        for held in self.store.runs(status=PAUSED, limit=10000):
            if held.held_by_person and held.paused_by:
                pauses.pause_descendants(self, held, held.paused_by)
        ids = []
        if self.durable is not None:  # a run with a workflow is its workflow's: only the others start
            return [r.run_id for r in self.store.runs(status=RUNNING, limit=10000) if self.durable.adopt(r.run_id)]
        for run in self.store.runs(status=RUNNING, limit=10000):
            with self.store.driving(run.run_id) as free:
                if not free:
                    continue  # another live driver on the shared store drives it
                self.store.append_event(run.run_id, EventKind.RUN_RECOVERED)
            ids.append(run.run_id)
            self.spawn(run.run_id)
        return ids

    def wait(self, run_id: str, timeout: float = 60.0) -> None:
        with self._lock:
            t = self._workers.get(run_id)
        if t is not None:
            t.join(timeout)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            workers = list(self._workers.values())
        for t in workers:
            t.join(10)

    # -- the turn -------------------------------------------------------------------------

    def run_until_stopped(self, run_id: str, max_steps: int = 10_000) -> Run:
        """Advance a run until it leaves `running` (or the driver stops).

        One trace per stretch of work: a `warden.run` span, and under it one span per step."""
        with tracing.span("warden.run", {"warden.run_id": run_id}):
            for _ in range(max_steps):
                run = self.store.run(run_id)
                if run.status != RUNNING or self._stopping.is_set() or not self.store.still_driving(run_id):
                    return run  # (a hold lost: another driver may drive it now; _drive looks again)
                self.advance(run)
            return self.store.run(run_id)

    def advance(self, run: Run, *, one_call: bool = False) -> str:
        """Take a running run one step further and say which: `tool_calls` (the turn's open calls,
        each checked and executed), or with `one_call` only the first open call taken one step
        further, as a durable workflow's step does (`check` or `execute`: process_first_call), then
        `conclude` or `model_turn`. A peer that is down pauses the run (`paused`)."""
        try:
            if checks.open_calls(self.store, run):
                with tracing.span("warden.run.step", {"warden.step": "tool_calls", "warden.turn": run.turn}):
                    if one_call:
                        return process_first_call(self, run)
                    process_calls(self, run)
                return "tool_calls"
            if run.final:
                with tracing.span("warden.run.step", {"warden.step": "conclude", "warden.turn": run.turn}):
                    conclude(self, run)  # its verification calls are done
                return "conclude"
            with tracing.span("warden.run.step", {"warden.step": "model_turn", "warden.turn": run.turn}):
                model_turn(self, run)
            return "model_turn"
        except DependencyUnavailable as exc:
            pause_run(self, self.store.run(run.run_id), exc.code, exc.message)
            return "paused"

    # -- seams: what the steps and the service reach through the Driver ---------------------

    def _start_child(self, parent: Run, child_id: str, ask: delegation.Delegate, req: cp.CheckRequest,
                     resp: cp.CheckResponse) -> Run:
        # a method, so a test can stand between a delegation and its child's creation
        return delegation.start_child(self, parent, child_id, ask, req, resp)

    def _pause_descendants(self, run: Run, person: str, reason: str = "") -> list[Run]:
        return pauses.pause_descendants(self, run, person, reason)

    def _counters(self, run: Run, *, turn_tool_calls: int = 0, identical: int = 0) -> cp.Counters:
        return checks.counters(self.store, run, turn_tool_calls=turn_tool_calls, identical=identical)

    def _pause(self, run: Run, code: str, reason: str, **extra: Any) -> None:
        pause_run(self, run, code, reason, **extra)

    def _finish(self, run: Run, status: RunStatus, code: str, reason: str, **extra: Any) -> None:
        finish_run(self, run, status, code, reason, **extra)
