"""What the driver knows of a run, typed: its status, the run itself, its events, the approvals it
waits for and the pauses a person asked for. The store hands these out; nothing reads a run by key."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class RunStatus(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_CHILD = "awaiting_child"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


RUNNING = RunStatus.RUNNING
PAUSED = RunStatus.PAUSED
AWAITING_APPROVAL = RunStatus.AWAITING_APPROVAL
AWAITING_CHILD = RunStatus.AWAITING_CHILD
SUCCEEDED = RunStatus.SUCCEEDED
FAILED = RunStatus.FAILED
CANCELLED = RunStatus.CANCELLED
TERMINAL = (SUCCEEDED, FAILED, CANCELLED)
# What a person may pause: a run that goes on, or waits for a person's approval or for its child.
PAUSABLE = (RUNNING, AWAITING_APPROVAL, AWAITING_CHILD)
# The pause codes of a person's pause: `paused` (they paused this run), `parent_paused` (they
# paused an ancestor and the pause reached this run; it resumes with its parent).
PERSON_PAUSED = "paused"
PARENT_PAUSED = "parent_paused"


class EventKind(StrEnum):
    """Every kind of event the driver appends to a run's log. The data of each is free-form JSON
    (what the record of that step needs); the kind is not."""

    RUN_STARTED = "run_started"
    RUN_RECOVERED = "run_recovered"
    RUN_PAUSED = "run_paused"
    RUN_RESUMED = "run_resumed"
    RUN_AWAITING_APPROVAL = "run_awaiting_approval"
    RUN_AWAITING_CHILD = "run_awaiting_child"
    RUN_RUNNING = "run_running"
    RUN_SUCCEEDED = "run_succeeded"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    CANCEL_INCOMPLETE = "cancel_incomplete"
    ACT_UNRECORDED = "act_unrecorded"
    GOAL_AMENDED = "goal_amended"
    MODEL_REPLY = "model_reply"
    REPLY_REJECTED = "reply_rejected"
    NUDGED = "nudged"
    PROVIDER_REFUSED = "provider_refused"
    DECISION = "decision"
    CALL_REFUSED = "call_refused"
    TOOL_REFUSED = "tool_refused"
    TOOL_OUTPUT = "tool_output"
    TOOL_RECEIPT = "tool_receipt"
    RUNNER_BUSY_RETRY = "runner_busy_retry"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    APPROVAL_WAIT = "approval_wait"  # a durable run's wait began: its deadline, fixed once
    CHILD_STARTED = "child_started"
    CHILD_ENDED = "child_ended"
    CHILD_NOT_RESUMED = "child_not_resumed"
    VERIFICATION_STARTED = "verification_started"
    OUTCOME_VERIFIED = "outcome_verified"
    LESSONS_LOADED = "lessons_loaded"
    LESSONS_UNAVAILABLE = "lessons_unavailable"
    LEARNING_PROPOSED = "learning_proposed"
    LEARNING_NOT_PROPOSED = "learning_not_proposed"


# A run's final event: the last one its log gets (a cancel writes it after stopping what ran).
FINAL_EVENTS = tuple(EventKind(f"run_{status}") for status in TERMINAL)


def status_event(status: RunStatus) -> EventKind:
    """The event a move to `status` appends."""
    return EventKind(f"run_{status.value}")


def now() -> float:
    return time.time()


def today(ts: float | None = None) -> str:
    return datetime.fromtimestamp(ts if ts is not None else now(), UTC).strftime("%Y-%m-%d")


@dataclass(slots=True, frozen=True)
class Run:
    """One run as last committed. Frozen: a change goes through the store, which hands back the
    run as it now stands. A child run also names its parent, its tree's root, its depth, its
    chain of authority (`delegates`) and the checkpoint's chain token (`run_token`)."""

    run_id: str
    status: RunStatus = RUNNING
    agent: str = ""
    agent_version: str = ""
    tenant: str = ""
    owner: str = ""
    mode: str = ""
    provider: str = ""
    provider_options: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    note: str = ""
    code: str = ""
    reason: str = ""
    goal_version: int = 1
    budget: dict[str, Any] = field(default_factory=dict)
    persona: str = ""
    tool_specs: list[dict[str, Any]] = field(default_factory=list)
    policy_revision: str = ""
    # the run's current plan (steps and their states), None before the model made one
    plan: dict[str, Any] | None = None
    has_plan: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    stretch_started_at: float = 0.0
    # a stretch: the turns since the run started or a person last resumed it (breakers count them)
    stretch: int = 1
    stretch_first_turn: int = 0
    stretch_tokens: int = 0
    stretch_turns: int = 0
    total_turns: int = 0
    total_tokens: int = 0
    consecutive_failures: int = 0
    drift: int = 0
    provider_refusals: int = 0
    provider_refused_for_good: int = 0
    spend_usd: float = 0.0
    descendant_stretch_turns: int = 0
    descendant_total_turns: int = 0
    model_attempts: int = 0
    turn: int = 0
    nudged: int = 0
    missing: list[Any] = field(default_factory=list)
    parent_run_id: str = ""
    root_run_id: str = ""
    depth: int = 0
    run_token: str = ""
    delegates: list[Any] = field(default_factory=list)
    # the model's final report while the driver verifies it (its turn, outcomes, summary, and why
    # any call_ok check could not be made); None otherwise
    final: dict[str, Any] | None = None
    paused_by: str = ""  # the person whose pause (code paused / parent_paused) holds the run
    skills: list[dict[str, Any]] | None = None  # the skills the run pinned (never their text)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    @property
    def held_by_person(self) -> bool:
        """Paused by a person, here or through an ancestor's pause."""
        return self.status == PAUSED and self.code in (PERSON_PAUSED, PARENT_PAUSED)


# -- which status moves a store may make, read by both stores (sqlite.py, postgresql.py) --------


def settable(updates: dict[str, Any], columns: Collection[str]) -> None:
    """KeyError for a field `update_run` may not set: a run's status moves only by the conditional
    transitions below (never by a plain update that would skip their conditions), its id never."""
    if "status" in updates or "run_id" in updates:
        raise KeyError("status" if "status" in updates else "run_id")
    for k in updates:
        if k not in columns:
            raise KeyError(k)


def waits_for_person(run: Run, children: Callable[[str], list[Run]]) -> bool:
    """Paused or awaiting approval, itself or through the child run it waits for."""
    if run.status in (PAUSED, AWAITING_APPROVAL):
        return True
    if run.status == AWAITING_CHILD:
        return any(waits_for_person(c, children) for c in children(run.run_id) if c.status not in TERMINAL)
    return False


def pausable_below(run_id: str, children: Callable[[str], list[Run]]) -> Iterator[Run]:
    """The runs below `run_id` that a parent's pause reaches: each active one that may be paused,
    reached through runs paused for their own reason (they keep it) but not through an active one
    (its own pause, once applied, reaches further). Ended runs stop the walk."""
    above = [run_id]
    while above:
        for child in children(above.pop()):
            if child.status in TERMINAL:
                continue
            if child.status not in PAUSABLE:
                above.append(child.run_id)
                continue
            yield child


def parent_pause_reason(parent_run_id: str, person: str, note: str) -> str:
    return f"paused with its parent run {parent_run_id} by {person}" + (f": {note}" if note else "")


RUN_FIELDS = frozenset(f.name for f in fields(Run))
# The run fields kept as JSON text in a store.
JSON_RUN_FIELDS = ("budget", "tool_specs", "plan", "missing", "provider_options", "delegates", "final", "skills")
# The counters a run adds to (add_to_run, add_turn); its other fields are set, never added to.
RUN_COUNTERS = frozenset({
    "stretch_tokens", "stretch_turns", "total_turns", "total_tokens", "turn", "consecutive_failures", "drift",
    "provider_refusals", "provider_refused_for_good", "spend_usd", "model_attempts",
    "descendant_stretch_turns", "descendant_total_turns",
})


@dataclass(slots=True, frozen=True)
class Event:
    """One entry of a run's append-only log; `seq` is global and increasing over all runs."""

    seq: int
    run_id: str
    time: float
    kind: str  # an EventKind for everything the driver writes; a str so an older log still reads
    data: dict[str, Any]


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    USED = "used"  # approved and relayed once: never attached to a check again
    CANCELLED = "cancelled"  # its run was cancelled while it waited
    EXPIRED = "expired"  # its deadline passed unanswered: the call was refused (approval_timed_out)


@dataclass(slots=True, frozen=True)
class Approval:
    """A REQUIRE_APPROVAL answer waiting for, or decided by, a person."""

    approval_id: str
    run_id: str
    call: int
    decision_id: str
    tool: str
    arguments: dict[str, Any]
    code: str
    rule: str
    reason: str
    status: str
    decided_by: str
    decided_at: float
    note: str
    created_at: float
    token: str
    deadline: float = 0.0  # Unix seconds the checkpoint's answer named (approval_deadline); 0: none


class PauseState(StrEnum):
    """A pause's life: `intent` (stored, not yet on the checkpoint's record), `recorded` (on the
    record, not yet applied), then `applied` (the run held) or `void` (it had paused or ended)."""

    INTENT = "intent"
    RECORDED = "recorded"
    APPLIED = "applied"
    VOID = "void"


OPEN_PAUSE_STATES = (PauseState.INTENT, PauseState.RECORDED)


@dataclass(slots=True, frozen=True)
class Pause:
    """A person's pause of a run, or its reach to a child run (`parent_run_id` names the parent)."""

    pause_id: str
    run_id: str
    code: str
    person: str
    reason: str
    note: str
    parent_run_id: str
    state: PauseState
    created_at: float
