"""The governed loop: from a person's goal to a verified outcome, one checked step at a time.

Every model call and every tool call is decided by the checkpoint first, with the run's counters.
The loop keeps all state in the RunStore and advances in small committed steps, so a driver that
crashes and restarts continues a run from its last step (a tool call in flight is re-sent with the
same grant: the toolrunner answers a repeated grant with the stored receipt, it never runs twice).

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

Delegation. An agent whose policy names agents it may delegate to is offered a `delegate` tool.
The checkpoint decides the delegation like any call; when it allows it, the driver starts a child
run pinned to the version the checkpoint chose, with the child's effective authority (only those
tools are offered), budget and chain token, and the parent waits (`awaiting_child`). When the
child ends, its outcome becomes the result of the parent's call and the parent goes on. A child
that pauses waits for a person like any run; cancelling a parent cancels its children, pausing
a parent pauses its active children, and they resume with it. Every
model turn is also counted in each run above (its descendant turns), so turn ceilings bound a
whole subtree.

Final reports. A `final` is kept on the run while the driver verifies it: for each `call_ok`
criterion the driver adds its own call (arguments from the goal and this run's receipts), which
is decided and run like the model's; then `_conclude` decides the criteria.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from driver import context, learnings, skills
from driver.boundary import Final, Handoff, Idle, Outcome, Rejection, ToolCalls, decide
from driver.clients import CheckpointClient, ToolRunnerClient
from driver.errors import DependencyUnavailable, DriverError, ProviderError, RunStateError
from driver.goal import Criterion, Goal, GoalBudget
from driver.output_events import OutputEvents
from driver.pricing import Prices
from driver.providers import child_options
from driver.providers.base import ModelRequest, Provider, ToolDef, estimate_tokens
from driver.run_ends import correct_end, record_end
from driver.runs.model import (
    AWAITING_APPROVAL,
    AWAITING_CHILD,
    CANCELLED,
    FAILED,
    PARENT_PAUSED,
    PAUSED,
    PERSON_PAUSED,
    RUNNING,
    SUCCEEDED,
    TERMINAL,
    EventKind,
    Pause,
    Run,
    RunStatus,
    now,
)
from driver.runs.store import RunStore
from driver.verify import Unresolved, Verification, call_arguments, verify_outcomes
from warden import canonical, tracing
from warden.budget import FIELDS as BUDGET_FIELDS
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import struct_to_dict, to_struct
from warden.tokens import APPROVAL_LABEL, TokenExpired, TokenInvalid, key_id_of, verify
from warden.toolrunner.v1 import toolrunner_pb2 as tr

log = logging.getLogger("warden.driver")

NUDGE = ("Your last answer started nothing and reported nothing. Call one of your tools, or answer "
         "with the final JSON object, or hand off. Another such answer pauses the run.")
MAX_TOKENS = 2048
_ALLOW, _DENY, _APPROVAL, _HALT = (cp.VERDICT_ALLOW, cp.VERDICT_DENY, cp.VERDICT_REQUIRE_APPROVAL,
                                   cp.VERDICT_HALT)

_Args = TypeVar("_Args", bound=BaseModel)


class _PlanStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    description: str = ""


class _Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[_PlanStep] = Field(min_length=1)


class _DelegateBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: int | None = Field(None, ge=0)
    turns: int | None = Field(None, ge=0)
    tool_calls: int | None = Field(None, ge=0)
    wall_clock_seconds: float | None = Field(None, ge=0)
    failures: int | None = Field(None, ge=0)
    spend_usd: float | None = Field(None, ge=0)


class _DelegateScope(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str] = Field(default_factory=list)
    access: list[str] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    connections: list[str] = Field(default_factory=list)
    threads: list[str] = Field(default_factory=list)
    subjects: list[str] = Field(default_factory=list)


class _Delegate(BaseModel):
    """The arguments of the `delegate` tool (see context.delegate_tool_schema)."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1)
    objective: str = Field(min_length=1)
    criteria: list[str] = Field(min_length=1)
    budget: _DelegateBudget | None = None
    narrowing: _DelegateScope | None = None

    def to_proto(self) -> cp.Delegation:
        d = cp.Delegation(agent=self.agent)
        if self.narrowing is not None:
            d.narrowing.CopyFrom(cp.Scope(**self.narrowing.model_dump()))
        if self.budget is not None and self.budget.model_dump(exclude_none=True):
            d.budget.CopyFrom(cp.Budget(**self.budget.model_dump(exclude_none=True)))
        return d


class _ProposedChanges(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowlist: list[str] | None = None
    delegates: list[str] | None = None
    persona: str | None = Field(None, min_length=1, max_length=4000)
    description: str | None = Field(None, max_length=4000)
    scope: _DelegateScope | None = None
    budget: _DelegateBudget | None = None

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=True)


class _Proposal(BaseModel):
    """The arguments of the `propose_agent_change` tool (see context.propose_tool_schema); what may
    change is checked again by the checkpoint, which owns the catalog."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=1000)
    changes: _ProposedChanges


def _tool_specs(resolved: cp.ResolveAgentResponse) -> list[dict[str, Any]]:
    specs = [{"name": s.name, "description": s.description, "access": s.access,
              "input_schema": struct_to_dict(s.input_schema, checked=False),
              **({"templates": s.templates} if s.templates else {})} for s in resolved.tool_specs]
    if not specs and resolved.tools:
        specs = [{"name": n, "description": "", "access": "", "input_schema": {"type": "object"}}
                 for n in resolved.tools]
    return specs


# the `tool` of an approval that is a model call's, not a tool call's (no call row of its own)
MODEL_CALL_APPROVAL = "(model call)"


def _halted(resp: cp.CheckResponse) -> dict[str, Any]:
    """What a HALT's pause event names: the breaker that tripped, or whom the case was handed to."""
    if resp.code == "handoff":
        return {"handoff_to": resp.handoff_to, "rule": resp.rule}
    return {"breaker": resp.code.removeprefix("breaker_")}


class _RunEnded(Exception):
    """The run ended (a person cancelled it) before an allowed call was sent to the toolrunner."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def verdict_name(v: int) -> str:
    return cp.Verdict.Name(v).removeprefix("VERDICT_")


class Driver:
    """One driver process: a store, the two peers, and the providers runs may use."""

    def __init__(self, store: RunStore, checkpoint: CheckpointClient, toolrunner: ToolRunnerClient,
                 provider_factory: Callable[[str, str, dict[str, Any]], Provider], *,
                 prices: Prices | None = None, provider_backoff_seconds: float = 1.0,
                 runner_busy_retries: int = 4, runner_busy_backoff_seconds: float = 0.5,
                 default_provider: str = "anthropic", default_model: str = "") -> None:
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
        self._workers: dict[str, threading.Thread] = {}
        self._again: set[str] = set()  # runs whose worker must look once more before it exits
        self._lock = threading.Lock()
        self._settling = threading.Lock()
        self._stopping = threading.Event()

    # -- person actions --------------------------------------------------------------------

    def start_run(self, agent: str, goal: Goal, *, owner: str, mode: str = "interactive",
                  provider: str = "scripted", model: str = "", provider_options: dict[str, Any] | None = None,
                  agent_version: str = "", spawn: bool = True,
                  inputs: dict[str, Any] | None = None) -> Run:
        with tracing.span("warden.run.start", {"warden.agent": agent, "warden.mode": mode}):
            return self._start_run(agent, goal, owner=owner, mode=mode, provider=provider, model=model,
                                   provider_options=provider_options, agent_version=agent_version, spawn=spawn,
                                   inputs=inputs)

    def _start_run(self, agent: str, goal: Goal, *, owner: str, mode: str, provider: str, model: str,
                   provider_options: dict[str, Any] | None, agent_version: str, spawn: bool,
                   inputs: dict[str, Any] | None) -> Run:
        # The checkpoint begins the run: it records the decision, pins the version, mints the run id
        # and the run token every later check presents. A refusal starts nothing.
        request = cp.StartRunRequest(agent=agent, agent_version=agent_version, person=owner,
                                     mode=cp.RUN_MODE_BACKGROUND if mode == "background" else cp.RUN_MODE_INTERACTIVE)
        if inputs:
            request.inputs.update(inputs)
        started = self.checkpoint.start_run(request)
        if started.decision.verdict != _ALLOW:
            raise RunStateError(f"the checkpoint refused to start the run: {started.decision.reason}",
                                code=started.decision.code or "run_refused")
        resolved = started.agent
        budget = goal.budget.model_dump(exclude_none=True)
        run = self.store.create_run(
            run_id=started.run_id, run_token=started.run_token,
            agent=resolved.agent, agent_version=resolved.agent_version, tenant=resolved.tenant, owner=owner,
            mode=mode, provider=provider, model=model or provider, provider_options=provider_options or {},
            persona=resolved.persona, tool_specs=_tool_specs(resolved), policy_revision=resolved.policy_revision,
            budget=budget, delegates=list(resolved.delegates),
            skills=skills.pinned(self.checkpoint, started.run_token),  # what its token lets it load
        )
        run_id = run.run_id
        self.store.add_goal(run_id, goal.model_dump(), author=owner)
        self.store.add_transcript(run_id, {"role": "user", "text": context.goal_message(goal.model_dump(), 1)})
        self.store.append_event(run_id, EventKind.RUN_STARTED, agent=resolved.agent, agent_version=resolved.agent_version,
                                owner=owner, mode=mode, provider=provider, model=run.model,
                                tools=[s["name"] for s in run.tool_specs], budget=budget,
                                policy_revision=resolved.policy_revision)
        learnings.load_lessons(self, run_id)  # lessons about this agent, as data from the catalog
        if spawn:
            self.spawn(run_id)
        return self.store.run(run_id)

    def approve(self, approval_id: str, person: str, note: str = "", *, approval_token: str,
                spawn: bool = True) -> Run:
        """Relay a person's approval: `approval_token` is what the checkpoint's Approve gave them for
        their own credential. The driver cannot make one; the checkpoint verifies it on the call."""
        if not approval_token:
            raise RunStateError("an approval carries the approval token the checkpoint gave the approver "
                                "(warden approve obtains it with the person's own credential)",
                                code="approval_token_required")
        if not person:
            raise RunStateError("an approval needs the person's id", code="person_required")
        # The driver's own history names who approved (`decided_by`, the approval_decided event), so
        # the token must be one the checkpoint signed (checked with its published public keys: the
        # driver holds no key that could make one), alive, approving this very decision and given to
        # this very person: a forged token, one approver relaying another's approval, or a token of
        # another call is refused here rather than recorded as this person's decision. The
        # checkpoint verifies it again when the call is sent.
        approval = self.store.approval(approval_id)
        claims: dict[str, Any] | None
        try:
            claims = self._verified_approval(approval_token)
        except TokenExpired as exc:
            raise RunStateError(f"the approval token is not {person!r}'s approval of decision "
                                f"{approval.decision_id!r}: {exc}; ask the approver again",
                                code="approval_invalid") from None
        except TokenInvalid as exc:
            raise RunStateError(f"the approval token is not {person!r}'s approval of decision "
                                f"{approval.decision_id!r} (not signed by the checkpoint: {exc})",
                                code="approval_invalid") from None
        if claims is None or (claims.get("decision_id"), claims.get("run_id"), claims.get("approver")) != (
                approval.decision_id, approval.run_id, person):
            named = "" if claims is None else (f" (it approves decision {str(claims.get('decision_id'))[:64]!r} "
                                               f"for {str(claims.get('approver'))[:100]!r})")
            raise RunStateError(f"the approval token is not {person!r}'s approval of decision "
                                f"{approval.decision_id!r}{named}", code="approval_invalid")
        return self._decide_approval(approval_id, person, note, approved=True, spawn=spawn, token=approval_token)

    def _verified_approval(self, token: str) -> dict[str, Any]:
        """The claims of an approval token the checkpoint signed and that is alive; TokenInvalid
        otherwise. A key id not in the set known here asks the checkpoint for its set again once
        (a rotation); an unreachable checkpoint is DependencyUnavailable: nothing is approved."""
        keys = self._token_keys
        if key_id_of(token) not in keys:
            keys = self._token_keys = self.checkpoint.token_keys()
        return verify(token, APPROVAL_LABEL, keys.get, time.time())

    def reject(self, approval_id: str, person: str, note: str = "", *, spawn: bool = True,
               checkpoint_decision_id: str = "") -> Run:
        """A rejection narrows, so the driver may record one itself; `checkpoint_decision_id` names the
        checkpoint's record of it when the person made one there (`warden reject` does)."""
        return self._decide_approval(approval_id, person, note, approved=False, spawn=spawn,
                                     checkpoint_decision_id=checkpoint_decision_id)

    def _decide_approval(self, approval_id: str, person: str, note: str, *, approved: bool,
                         spawn: bool, token: str = "", checkpoint_decision_id: str = "") -> Run:
        if not person:
            raise RunStateError("an approval needs the person's id", code="person_required")
        approval = self.store.approval(approval_id)
        run = self.store.run(approval.run_id)
        if run.status != AWAITING_APPROVAL:
            raise RunStateError(f"run {run.run_id} is {run.status}, not awaiting approval",
                                code="run_not_awaiting_approval")
        approval = self.store.decide_approval(approval_id, "approved" if approved else "rejected", person, note,
                                              token=token)
        reason = f"a person ({person}) rejected this call" + (f": {note}" if note else "")
        model_call = approval.tool == MODEL_CALL_APPROVAL
        if model_call:
            pass  # no call row: an approved model call is attached to the next turn's check
        elif approved:
            self.store.update_call(approval.call, status="approved")
        else:
            self.store.update_call(approval.call, status="done", verdict="REJECTED", code="approval_rejected",
                                   result={"content": context.refusal_result("approval_rejected", reason),
                                           "is_error": True})
            self.store.add_to_run(run.run_id, consecutive_failures=1)
        self.store.append_event(run.run_id, EventKind.APPROVAL_DECIDED, approval_id=approval_id,
                                decision="approved" if approved else "rejected", person=person, note=note,
                                tool=approval.tool, checkpoint_decision_id=checkpoint_decision_id or None)
        if model_call and not approved:
            # without the model the run cannot go on: it waits for a person (amend, resume or cancel)
            record_end(self.checkpoint, self.store, run.run_id, PAUSED, "approval_rejected", reason)
            if self.store.transition(run.run_id, AWAITING_APPROVAL, PAUSED, "approval_rejected", reason):
                self.store.append_event(run.run_id, EventKind.RUN_PAUSED, code="approval_rejected", reason=reason)
            else:
                correct_end(self.checkpoint, self.store, run.run_id, PAUSED)
            return self.store.run(run.run_id)
        # Only from awaiting_approval: a cancel that landed meanwhile stays a cancel.
        if self.store.transition(run.run_id, AWAITING_APPROVAL, RUNNING, "", "") and spawn:
            self.spawn(run.run_id)
        return self.store.run(run.run_id)

    def pause(self, run_id: str, person: str, reason: str = "") -> tuple[Run, list[Run]]:
        """A person pauses a run that is running or waiting (approval, child), and with it every
        active run below it (code `parent_paused`); returns the run and the descendants paused.

        The run stops at its next step boundary: a step under way (a model call, a tool call the
        checkpoint allowed) finishes and is kept. The act is on the checkpoint's record first: a
        pause the checkpoint refuses to record does not happen (`act_not_recorded`).

        The pause is stored as an intent before it is sent to the checkpoint (with the intent's id,
        so a second send is not recorded twice) and closed in the transaction that holds the run
        and adds its children's pauses: a driver that stops anywhere in between applies it, and
        the pauses it reached, when it starts again (recover), each recorded and applied once."""
        run = self.store.run(run_id)
        if not person:
            raise RunStateError("a pause needs the person's id", code="person_required")
        self._check_pausable(run)
        why = f"paused by {person}" + (f": {reason}" if reason else "")
        intent = self.store.add_pause(run_id, PERSON_PAUSED, person, why, reason)
        if intent is None:
            # One is under way, or was left open because the checkpoint could not be reached:
            # finish that one (sent again under its own id, it is recorded once).
            under_way = self.store.open_pauses([run_id])
            if not under_way:  # it closed meanwhile
                self._check_pausable(self.store.run(run_id))
                raise RunStateError(f"run {run_id} is being paused", code="run_already_paused")
            intent = under_way[0]
        if intent.state == "intent":
            try:
                self._record_act(run, "pause", intent.person, intent.note, act_id=intent.pause_id)
            except RunStateError:
                self.store.drop_pause(intent.pause_id)  # refused: not on the record, so it never happened
                raise
            # DependencyUnavailable: the checkpoint may have recorded it before the answer was
            # lost, so the intent stays open; asked again, or after a restart, it is applied.
            self.store.pause_recorded(intent.pause_id)
        moved, below = self.store.apply_pause(intent.pause_id)
        if not moved:
            self._check_pausable(self.store.run(run_id))  # it paused or ended meanwhile: say which
        return self.store.run(run_id), self._apply_pauses(below)

    def _apply_pauses(self, pauses: list[Pause]) -> list[Run]:
        """Apply open pauses in order (each one's children after it): record those not yet on the
        record, under their own id, then hold the run. A pause reaching further only stops more,
        so, like a cancel, it happens even when the checkpoint cannot record it (an
        `act_unrecorded` event says so) rather than leave a run going under it. Returns the runs
        held."""
        held: list[Run] = []
        todo = list(pauses)
        while todo:
            p = todo.pop(0)
            if p.state == "intent":
                details = {"parent_run_id": p.parent_run_id} if p.parent_run_id else {}
                note = p.note if p.code == PERSON_PAUSED else p.reason
                self._record_act(self.store.run(p.run_id), "pause", p.person, note, required=False,
                                 act_id=p.pause_id, **details)
                self.store.pause_recorded(p.pause_id)
            moved, below = self.store.apply_pause(p.pause_id)
            if moved:
                held.append(self.store.run(p.run_id))
            todo += below
        return held

    @staticmethod
    def _check_pausable(run: Run) -> None:
        if run.status in TERMINAL:
            raise RunStateError(f"run {run.run_id} is already {run.status}", code=f"run_{run.status}")
        if run.status == PAUSED:
            raise RunStateError(f"run {run.run_id} is already paused ({run.code}: {run.reason})",
                                code="run_already_paused")

    def _pause_descendants(self, run: Run, person: str, reason: str = "") -> list[Run]:
        """Pause every active run below `run`, which `person` paused (or whose pause reached it):
        code `parent_paused`, each act recorded under the child's own run token naming the same
        person. A run already paused keeps its own reason and is not resumed with the parent; ended
        ones are skipped. Safe to repeat: only runs still running or waiting are moved, and a run
        with a pause under way gets no second one."""
        return self._apply_pauses(self.store.pause_below(run.run_id, person, reason))

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
        pause of that child) stays paused. A child that could not be resumed gets a
        `child_not_resumed` event on this run and can then be resumed on its own."""
        run = self.store.run(run_id)
        if run.status != PAUSED:
            raise RunStateError(f"run {run_id} is {run.status}, not paused", code="run_not_paused")
        if not person:
            raise RunStateError("a resume needs the person's id", code="person_required")
        if run.code == PARENT_PAUSED and run.parent_run_id \
                and self.store.run(run.parent_run_id).status == PAUSED:
            raise RunStateError(f"run {run_id} is held by the pause of its parent run {run.parent_run_id}; "
                                "resume the parent, and this run resumes with it", code="parent_paused")
        raise_budget = {k: v for k, v in (raise_budget or {}).items() if v}
        if "turns_total" in raise_budget:
            raise RunStateError("turns_total is the run's lifetime ceiling; no resume passes it",
                                code="turns_total_fixed")
        if run.code == "breaker_turns_total":
            raise RunStateError("the run used its lifetime turns (turns_total); start a new run",
                                code="turns_total_exhausted")
        unknown = set(raise_budget) - set(BUDGET_FIELDS)
        if unknown:
            raise RunStateError(f"unknown budget fields {sorted(unknown)}", code="invalid_budget")
        budget = dict(run.budget or {})
        budget.update(raise_budget)
        GoalBudget.model_validate(budget)
        note = f"A person ({person}) resumed the run." + (f" They wrote: {reply}" if reply else "")
        cascade: dict[str, Any] = {"parent_run_id": with_parent} if with_parent else {}
        if with_parent:
            note = f"A person ({person}) resumed your parent run {with_parent}, and this run with it."
        # on the record first, or not at all
        self._record_act(run, "resume", person, reply, raised=raise_budget, **cascade)
        # Only from paused: a cancel (or another resume) that landed meanwhile wins.
        if not self.store.transition(run_id, PAUSED, RUNNING, "", ""):
            current = self.store.run(run_id).status
            raise RunStateError(f"run {run_id} is {current}, not paused", code="run_not_paused")
        # A pause left open while the run was paused anyway (its checkpoint answer was lost) is
        # settled by this later act: a restart must not apply it to the resumed run.
        self.store.void_open_pauses(run_id)
        self.store.update_run(run_id, budget=budget, note=note, paused_by="",
                              stretch_started_at=now(), stretch=run.stretch + 1, stretch_first_turn=run.turn + 1,
                              drift=0, stretch_tokens=0,
                              stretch_turns=0, descendant_stretch_turns=0, provider_refusals=0, provider_refused_for_good=0,
                              consecutive_failures=0, nudged=0, final=None)
        self.store.append_event(run_id, EventKind.RUN_RESUMED, person=person, reply=reply, raised=raise_budget,
                                agent_version=run.agent_version, **cascade)
        if spawn:
            self.spawn(run_id)
        resumed: list[Run] = []
        for child in self.store.children(run_id):  # parents first: a child that ends finds its parent going
            if child.status != PAUSED or child.code != PARENT_PAUSED:
                continue
            try:
                got, below = self.resume_with_children(child.run_id, person, spawn=spawn, with_parent=run_id)
            except DriverError as exc:
                self.store.append_event(run_id, EventKind.CHILD_NOT_RESUMED, child_run_id=child.run_id, code=exc.code,
                                        message=exc.message)
                continue
            resumed += [got, *below]
        return self.store.run(run_id), resumed

    def amend_goal(self, run_id: str, goal: Goal, person: str) -> int:
        run = self.store.run(run_id)
        if run.status in TERMINAL:
            raise RunStateError(f"run {run_id} is {run.status}", code=f"run_{run.status}")
        # The same rule as resume: the lifetime ceiling can be lowered or set, never raised or lifted.
        current = (run.budget or {}).get("turns_total")
        wanted = goal.budget.turns_total
        if current is not None and wanted is not None and wanted > current:
            raise RunStateError(f"turns_total is the run's lifetime ceiling ({current}); an amendment "
                                f"cannot raise it to {wanted}", code="turns_total_fixed")
        self._record_act(run, "amend", person, "", goal_version=run.goal_version + 1,
                         budget=goal.budget.model_dump(exclude_none=True))
        version = self.store.add_goal(run_id, goal.model_dump(), author=person)
        self.store.update_run(run_id, goal_version=version, budget={**(run.budget or {}),
                                                                    **goal.budget.model_dump(exclude_none=True)})
        self.store.update_run(run_id, note=context.goal_message(goal.model_dump(), version))
        self.store.append_event(run_id, EventKind.GOAL_AMENDED, version=version, person=person)
        return version

    def cancel(self, run_id: str, person: str, reason: str = "") -> Run:
        run = self.store.run(run_id)
        if run.status in TERMINAL:
            raise RunStateError(f"run {run_id} is already {run.status}", code=f"run_{run.status}")
        reason = reason or f"cancelled by {person}"
        # A cancel only narrows: when the checkpoint cannot record it, it still happens (and says so).
        self._record_act(run, "cancel", person, reason, required=False)
        record_end(self.checkpoint, self.store, run_id, CANCELLED, "cancelled", reason)
        # The status first (it stops the worker); the final event last, once everything that ran
        # for the run was stopped, so a watcher reads the whole story before the end.
        if not self.store.set_status(run_id, CANCELLED, "cancelled", reason):
            correct_end(self.checkpoint, self.store, run_id, CANCELLED)
            current = self.store.run(run_id).status  # it ended meanwhile: that end stands
            raise RunStateError(f"run {run_id} is already {current}", code=f"run_{current}")
        for child in self.store.children(run_id):  # nothing keeps running for a cancelled run
            if child.status not in TERMINAL:
                try:
                    self.cancel(child.run_id, person, f"its parent run {run_id} was cancelled")
                except RunStateError:
                    pass  # it ended meanwhile: nothing left to stop
        for a in self.store.approvals(run_id, status="pending"):
            try:
                self.store.decide_approval(a.approval_id, "cancelled", person, "run cancelled")
            except RunStateError:
                pass  # a person decided it meanwhile: the run is cancelled all the same, nothing of it runs
        stopped = 0
        try:
            stopped = self.toolrunner.cancel(run_id)
        except DriverError as exc:  # the run is cancelled either way; say what could not be stopped
            self.store.append_event(run_id, EventKind.CANCEL_INCOMPLETE, code=exc.code, message=exc.message)
        self.store.append_event(run_id, EventKind.RUN_CANCELLED, code="cancelled", reason=reason, person=person,
                                stopped_calls=stopped)
        if run.parent_run_id:
            self._settle_child(self.store.run(run_id))
        return self.store.run(run_id)

    def _record_act(self, run: Run, act: str, person: str, note: str, *, required: bool = True,
                    act_id: str = "", **details: Any) -> None:
        """A person's act goes on the checkpoint's hash-chained record before it takes effect.

        `required`: refused or unrecorded, the act does not happen (RunStateError / the client's
        DependencyUnavailable). Otherwise (a cancel) the failure is an event and the act goes on."""
        request = cp.RecordActRequest(run=cp.RunContext(run_token=run.run_token), act=act, person=person,
                                      note=note, details=to_struct(details), act_id=act_id)
        try:
            answer = self.checkpoint.record_act_answer(request)
            decision = answer.decision
            problem = "" if decision.verdict == _ALLOW else f"{decision.code}: {decision.reason}"
        except DriverError as exc:
            if required:
                raise
            problem = f"{exc.code}: {exc.message}"
        if not problem:
            if answer.run_token:  # a resume renewed the run's lifetime: present the new token from now on
                self.store.update_run(run.run_id, run_token=answer.run_token)
            return
        if required:
            raise RunStateError(f"the checkpoint did not record the {act}: {problem}", code="act_not_recorded")
        self.store.append_event(run.run_id, EventKind.ACT_UNRECORDED, act=act, person=person, problem=problem)

    # -- workers --------------------------------------------------------------------------

    def spawn(self, run_id: str) -> None:
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
                try:
                    self.run_until_stopped(run_id)
                except Exception as exc:  # noqa: BLE001 - a bug must pause the run, never leave it "running"
                    log.exception("run %s: unexpected error", run_id)
                    self._pause(self.store.run(run_id), "driver_error", f"{type(exc).__name__}: {exc}")
                with self._lock:
                    if run_id not in self._again or self._stopping.is_set():
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

    def recover(self) -> list[str]:
        """After a restart: continue every run that was running when the driver stopped, and
        hand the outcome of any child that ended meanwhile to the parent waiting for it."""
        # Pauses the driver stopped in the middle of come first: stored before they were sent to
        # the checkpoint, they are recorded (once: under their own id) and applied before any
        # run goes on, parents' before the children they reach.
        self._apply_pauses(self.store.open_pauses())
        # A parent waiting for a child looks again too: the child may have ended, or its outcome
        # may be in the call already, while this driver was down.
        for parent in self.store.runs(status=AWAITING_CHILD, limit=10000):
            self.store.transition(parent.run_id, AWAITING_CHILD, RUNNING, "", "")
        # A driver stopped in the middle of a pause cascade: the runs below a person's pause are
        # held before anything goes on (a no-op for those the cascade reached).
        for held in self.store.runs(status=PAUSED, limit=10000):
            if held.code in (PERSON_PAUSED, PARENT_PAUSED) and held.paused_by:
                self._pause_descendants(held, held.paused_by)
        ids = [r.run_id for r in self.store.runs(status=RUNNING, limit=10000)]
        for run_id in ids:
            self.store.append_event(run_id, EventKind.RUN_RECOVERED)
            self.spawn(run_id)
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

    def run_until_stopped(self, run_id: str, max_steps: int = 10_000) -> Run:
        """Advance a run until it leaves `running` (or the driver stops).

        One trace per stretch of work: a `warden.run` span, and under it one span per step."""
        with tracing.span("warden.run", {"warden.run_id": run_id}):
            for _ in range(max_steps):
                run = self.store.run(run_id)
                if run.status != RUNNING or self._stopping.is_set():
                    return run
                try:
                    if self._open_calls(run):
                        with tracing.span("warden.run.step", {"warden.step": "tool_calls", "warden.turn": run.turn}):
                            self._process_calls(run)
                    elif run.final:
                        with tracing.span("warden.run.step", {"warden.step": "conclude", "warden.turn": run.turn}):
                            self._conclude(run)  # its verification calls are done
                    else:
                        with tracing.span("warden.run.step", {"warden.step": "model_turn", "warden.turn": run.turn}):
                            self._model_turn(run)
                except DependencyUnavailable as exc:
                    self._pause(self.store.run(run_id), exc.code, exc.message)
            return self.store.run(run_id)

    # -- the pieces of a turn ---------------------------------------------------------------

    def _open_calls(self, run: Run) -> list[dict[str, Any]]:
        return [c for c in self.store.calls(run.run_id, run.turn) if c["status"] != "done"]

    def _pause(self, run: Run, code: str, reason: str, **extra: Any) -> None:
        record_end(self.checkpoint, self.store, run.run_id, PAUSED, code, reason)  # on the record first
        if not self.store.set_status_logged(run.run_id, PAUSED, code, reason, **extra):
            correct_end(self.checkpoint, self.store, run.run_id, PAUSED)

    def _finish(self, run: Run, status: RunStatus, code: str, reason: str, **extra: Any) -> None:
        record_end(self.checkpoint, self.store, run.run_id, status, code, reason)  # on the record first
        if not self.store.set_status_logged(run.run_id, status, code, reason, **extra):
            correct_end(self.checkpoint, self.store, run.run_id, status)
            return  # it ended otherwise meanwhile (a cancel): that end stands
        if status == FAILED:  # a failed run becomes a proposed learning
            learnings.report(self, run, cp.LEARNING_SOURCE_RUN_FAILED, code, f"the run failed ({code}): {reason}")
        if run.parent_run_id:
            self._settle_child(self.store.run(run.run_id))

    def _run_context(self, run: Run) -> cp.RunContext:
        """The run token says who acts for whom; the driver adds what it keeps: the person's budget
        for the run (a child's granted one is bound in its token) and whether a plan is approved."""
        budget = cp.Budget(**(run.budget or {}))  # a key the wire does not know is an error, never dropped
        return cp.RunContext(run_token=run.run_token, budget=budget, has_plan=bool(run.has_plan))

    def _counters(self, run: Run, *, turn_tool_calls: int = 0, identical: int = 0) -> cp.Counters:
        owner_spend, tenant_spend = self.store.spend_today(run.owner, run.tenant)
        tree_runs, tree_tokens = self.store.tree(run.root_run_id or run.run_id)
        return cp.Counters(
            stretch_tokens=run.stretch_tokens, stretch_turns=run.stretch_turns,
            total_turns=run.total_turns, turn_tool_calls=turn_tool_calls,
            wall_clock_seconds=max(0.0, now() - run.stretch_started_at), identical_calls=identical,
            consecutive_failures=run.consecutive_failures, drift=run.drift, tree_tokens=tree_tokens,
            owner_spend_today_usd=owner_spend, tenant_spend_today_usd=tenant_spend,
            provider_refusals=run.provider_refusals, children=len(self.store.children(run.run_id)),
            provider_refused_for_good=bool(run.provider_refused_for_good),
            tree_runs=tree_runs, run_spend_usd=run.spend_usd,
            descendant_stretch_turns=run.descendant_stretch_turns,
            descendant_total_turns=run.descendant_total_turns,
        )

    def _record_decision(self, run: Run, action: str, resp: cp.CheckResponse, **extra: Any) -> None:
        self.store.append_event(run.run_id, EventKind.DECISION, action=action, verdict=verdict_name(resp.verdict),
                                code=resp.code, rule=resp.rule, reason=resp.reason, decision_id=resp.decision_id,
                                **extra)

    def _flush_feedback(self, run: Run) -> None:
        """Before the next model call: answer every tool_use of the last reply, then any note."""
        run_id = run.run_id
        transcript = self.store.transcript(run_id)
        if transcript and transcript[-1]["role"] == "assistant":
            # the driver's own verification calls are not the model's: it gets no result for them
            calls = {c["call_id"]: c for c in self.store.calls(run_id, run.turn) if not c["verifies"]}
            results: list[dict[str, Any]] = []
            answered: set[str] = set()  # a provider pairs each tool call id with one result
            for action in transcript[-1]["reply"].get("actions") or []:
                if not (isinstance(action, dict) and action.get("action") == "tool_call" and action.get("id")):
                    continue
                if action["id"] in answered:
                    continue
                answered.add(action["id"])
                c = calls.get(action["id"])
                if c is not None and c["result"]:
                    results.append({"call_id": action["id"], **c["result"]})
                else:
                    results.append({"call_id": action["id"], "is_error": True,
                                    "content": context.refusal_result("not_run", "this call did not run")})
            # scripted replies carry no tool_use ids: their results are listed by the loop's ids
            if not results:
                results = [{"call_id": c["call_id"], **c["result"]} for c in calls.values() if c["result"]]
            self.store.add_transcript(run_id, {"role": "results", "results": results,
                                               "text": ""})
        if run.note:
            self.store.add_transcript(run_id, {"role": "user", "text": context.note(run.note)})
            self.store.update_run(run_id, note="")

    def _model_turn(self, run: Run) -> None:
        run_id = run.run_id
        waiting = next((a for a in self.store.approvals(run_id, status="pending")
                        if a.tool == MODEL_CALL_APPROVAL), None)
        if waiting is not None:
            # A run paused while its model call waited for a person, then resumed: it waits for
            # that approval again rather than ask for a second one.
            self.store.transition(run_id, RUNNING, AWAITING_APPROVAL, waiting.code, waiting.reason)
            return
        self._flush_feedback(run)
        run = self.store.run(run_id)
        transcript = self.store.transcript(run_id)
        delegates = run.delegates or []
        system = context.system_prompt(run.persona, can_delegate=bool(delegates)) + skills.prompt(run)
        tools = [ToolDef(name=s["name"], description=s["description"], input_schema=s["input_schema"])
                 for s in run.tool_specs]
        tools.append(ToolDef(name=context.PLAN_TOOL, description="Propose your plan before any other tool call.",
                             input_schema=context.PLAN_TOOL_SCHEMA))
        if delegates:
            tools.append(ToolDef(name=context.DELEGATE_TOOL, description="Start a child run of another agent.",
                                 input_schema=context.delegate_tool_schema(delegates)))
        tools.append(ToolDef(name=context.PROPOSE_TOOL, description="Propose a change to an agent's definition; "
                             "a tenant admin reviews it, and until then nothing changes.",
                             input_schema=context.propose_tool_schema()))
        tools += skills.tool_defs(run)
        tools.append(ToolDef(name=context.LEARN_TOOL, description="Propose a lesson for later runs of this agent; "
                             "a person reviews it.", input_schema=context.learn_tool_schema()))
        input_estimate = estimate_tokens(system + str(transcript))
        req = cp.CheckRequest(run=self._run_context(run), counters=self._counters(run),
                              model_call=cp.ModelCall(provider=run.provider, model=run.model,
                                                      max_tokens=MAX_TOKENS, input_tokens=input_estimate))
        approved = next((a for a in self.store.approvals(run_id, status="approved")
                         if a.tool == MODEL_CALL_APPROVAL), None)
        if approved is not None:
            req.approval.CopyFrom(cp.Approval(decision_id=approved.decision_id, token=approved.token))
        resp = self.checkpoint.check(req)
        self._record_decision(run, "model_call", resp, model=run.model)
        if approved is not None:  # attached once: the checkpoint spent it or refused it
            self.store.settle_approval(approved.approval_id, "used")
        if resp.verdict == _HALT:
            self._pause(run, resp.code, resp.reason, **_halted(resp))
            return
        if resp.verdict == _APPROVAL:  # a person reads what the model is about to be asked
            approval_id = self.store.add_approval(
                run_id=run_id, call=0, decision_id=resp.decision_id, tool=MODEL_CALL_APPROVAL,
                arguments={"provider": run.provider, "model": run.model, "max_tokens": MAX_TOKENS,
                           "input_tokens": input_estimate},
                code=resp.code, rule=resp.rule, reason=resp.reason)
            # Only from running: a person's pause (or a cancel) that landed during the check stands;
            # on resume the run comes back here and waits for this approval.
            self.store.transition(run_id, RUNNING, AWAITING_APPROVAL, resp.code, resp.reason)
            self.store.append_event(run_id, EventKind.APPROVAL_REQUESTED, approval_id=approval_id, tool=MODEL_CALL_APPROVAL,
                                    arguments={"model": run.model}, rule=resp.rule, reason=resp.reason)
            return
        if resp.verdict != _ALLOW:
            self._pause(run, "model_call_denied", f"{resp.code}: {resp.reason}", decision_code=resp.code)
            return
        provider = self.provider_factory(run.provider, run.model, run.provider_options or {})
        attempt = run.model_attempts
        self.store.add_to_run(run_id, model_attempts=1)
        try:
            with tracing.span("warden.model.call", {"gen_ai.system": run.provider, "gen_ai.request.model": run.model,
                                                    "warden.attempt": attempt}):
                reply = provider.complete(ModelRequest(run_id=run_id, attempt=attempt, system=system,
                                                       transcript=transcript, tools=tools, max_tokens=MAX_TOKENS))
        except ProviderError as exc:
            # credit, quota and auth refusals do not heal by retrying: the checkpoint trips the
            # provider breaker on the next check, whatever the count
            self.store.add_to_run(run_id, provider_refusals=1,
                                  provider_refused_for_good=int(exc.kind in ("credit", "quota", "auth")))
            self.store.append_event(run_id, EventKind.PROVIDER_REFUSED, kind=exc.kind, code=exc.code, status=exc.status,
                                    message=exc.message[:500])
            if self.provider_backoff_seconds:
                time.sleep(min(30.0, self.provider_backoff_seconds * (2 ** run.provider_refusals)))
            return
        tokens = reply.input_tokens + reply.output_tokens
        usd = self.prices.cost(run.model, reply.input_tokens, reply.output_tokens)
        self.store.add_spend(run_id, run.owner, run.tenant, usd)
        # the turn counts for this run and, below them, for every run above it
        run = self.store.add_turn(run_id, stretch_tokens=tokens, total_tokens=tokens, stretch_turns=1,
                                  total_turns=1, turn=1, spend_usd=usd)
        self.store.add_transcript(run_id, {"role": "assistant", "reply": reply.model_dump(mode="json")})
        decision = decide(reply, [t.name for t in tools])  # the contract: exactly the tools offered
        self.store.append_event(run_id, EventKind.MODEL_REPLY, turn=run.turn, kind=decision.kind,
                                input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                                stop_reason=reply.stop_reason, usd=usd, proposal=decision.model_dump(mode="json"))
        if isinstance(decision, ToolCalls):
            for i, call in enumerate(decision.calls):
                self.store.add_call(run_id, run.turn, i, call_id=call.call_id, tool=call.tool,
                                    arguments=call.arguments, args_sha=canonical.sha256_hex(call.arguments),
                                    plan_step=call.plan_step)
        elif isinstance(decision, Rejection):
            self.store.add_to_run(run_id, consecutive_failures=1)
            self.store.append_event(run_id, EventKind.REPLY_REJECTED, code=decision.code, detail=decision.detail)
            for i, call_id in enumerate(decision.call_ids):
                pk = self.store.add_call(run_id, run.turn, i, call_id=call_id, tool="", arguments={},
                                         args_sha="", plan_step="")
                self.store.update_call(pk, status="done", verdict="REJECTED", code=decision.code,
                                       result={"is_error": True, "content": context.refusal_result(
                                           decision.code, decision.detail)})
            self.store.update_run(run_id, note=f"Your last reply was rejected ({decision.code}): {decision.detail}")
        elif isinstance(decision, Idle):
            if run.nudged:
                self._pause(run, "no_progress", "two turns in a row started nothing and reported nothing")
            else:
                self.store.update_run(run_id, nudged=1, note=NUDGE)
                self.store.append_event(run_id, EventKind.NUDGED)
        elif isinstance(decision, Handoff):
            self._pause(run, decision.code, decision.reason or "the model handed the run to a person")
        elif isinstance(decision, Final):
            self._verify_final(run, decision)

    def _verify_final(self, run: Run, decision: Final) -> None:
        """The model says it is done: keep its report, and for each call_ok criterion add the
        driver's own call, with arguments from the goal and this run's own receipts (never from
        the model's text). The calls go through the checkpoint and the toolrunner like the
        model's (run_until_stopped processes them); `_conclude` then decides."""
        run_id = run.run_id
        work = self.store.receipts(run_id, work_only=True)
        unresolved: dict[str, str] = {}
        calls: list[dict[str, Any]] = []
        for c in self.store.goal(run_id)["criteria"]:
            check = c.get("check") or {}
            if check.get("kind") != "call_ok":
                continue
            try:
                arguments, sources = call_arguments(check, work)
            except Unresolved as exc:
                unresolved[c["id"]] = str(exc)
                continue
            calls.append({"call_id": f"verify-{c['id']}", "tool": check["tool"], "arguments": arguments,
                          "args_sha": canonical.sha256_hex(arguments), "plan_step": "", "verifies": c["id"],
                          "sources": sources})
        final = {"turn": run.turn, "summary": decision.summary, "unresolved": unresolved,
                 "outcomes": [o.model_dump() for o in decision.outcomes]}
        self.store.begin_final(run_id, run.turn, final,
                               [{k: v for k, v in x.items() if k != "sources"} for x in calls])
        if calls or unresolved:
            self.store.append_event(run_id, EventKind.VERIFICATION_STARTED, unresolved=unresolved, calls=[
                {"criterion": x["verifies"], "tool": x["tool"], "arguments": x["arguments"],
                 "from_receipts": x["sources"]} for x in calls])

    def _conclude(self, run: Run) -> None:
        """Decide the model's final report: checks on the run's receipts and on the driver's own
        verification calls, evidence for the rest. All met: succeeded; else the run pauses."""
        run_id, final = run.run_id, run.final
        if final is None:  # the caller concludes only a run with a final report under way
            raise RunStateError(f"run {run_id} has no final report to conclude", code="run_not_concluding")
        goal = self.store.goal(run_id)
        verifications = {cid: Verification(tool="", arguments={}, unresolved=why)
                         for cid, why in final["unresolved"].items()}
        for call in self.store.calls(run_id, final["turn"]):
            if call["verifies"]:
                receipt = self.store.receipt(call["decision_id"]) if call["decision_id"] else None
                refused = "" if receipt else f"{call['verdict'] or 'not decided'} {call['code']}".strip()
                verifications[call["verifies"]] = Verification(call["tool"], call["arguments"], receipt, refused)
        outcomes = [Outcome.model_validate(o) for o in final["outcomes"]]
        met, missing = verify_outcomes(goal, outcomes, self.store.receipts(run_id, work_only=True), verifications)
        self.store.append_event(run_id, EventKind.OUTCOME_VERIFIED, met=met, missing=missing, summary=final["summary"],
                                verified=[{"criterion": cid, "tool": v.tool, "arguments": v.arguments,
                                           "decision_id": v.receipt["decision_id"] if v.receipt else None}
                                          for cid, v in verifications.items() if not v.unresolved])
        if missing:
            self.store.update_run(run_id, missing=missing)
            self._pause(run, "criteria_unmet", "not every criterion is met: " + "; ".join(missing),
                        missing=missing)
        else:
            self.store.update_run(run_id, missing=[])
            self._finish(run, SUCCEEDED, "succeeded", final["summary"] or "every criterion is met", met=met)
        self.store.update_run(run_id, final=None)  # after the outcome: a crash before it decides again

    def _process_calls(self, run: Run) -> None:
        run_id = run.run_id
        for call in self.store.calls(run_id, run.turn):
            if call["status"] == "done":
                continue
            with tracing.span("warden.tool.call", {"warden.tool": call["tool"], "warden.call.status": call["status"]}):
                if not self._process_call(run_id, call):
                    return

    def _process_call(self, run_id: str, call: dict[str, Any]) -> bool:
        """Take one open call a step further; False when the run must stop here for now."""
        run = self.store.run(run_id)
        if run.status != RUNNING:
            return False
        if call["status"] == "awaiting_approval":
            self.store.transition(run_id, RUNNING, AWAITING_APPROVAL, call["code"], "waiting for a person")
            return False
        if call["status"] == "awaiting_child":
            return self._child_done(run, call)
        if call["status"] == "executing":
            self._execute(run, call)
            return True
        return self._decide_call(run, call)

    def _child_done(self, run: Run, call: dict[str, Any]) -> bool:
        """A delegation call whose child was started: False while the run must wait for the child."""
        if not self.store.has_run(call["child_run_id"]):
            self._refuse(run, call, "child_not_started", "the driver stopped before the child run "
                         "was created; nothing ran for this delegation", decision_id=call["decision_id"])
            return True
        child = self.store.run(call["child_run_id"])
        if child.status not in TERMINAL:
            self.store.wait_for_child(run.run_id, call["id"],
                                      f"waiting for child run {child.run_id} ({child.agent})")
        # Looked at again after the wait began: a child that ended in between is settled
        # here, or by its own worker, which then wakes this run.
        child = self.store.run(child.run_id)
        if child.status in TERMINAL:
            self._settle_child(child)
            return True
        return False

    def _made_in_turn(self, run: Run, call: dict[str, Any]) -> int:
        return sum(1 for c in self.store.calls(run.run_id, run.turn)
                   if c["status"] == "done" and c["idx"] < call["idx"])

    def _refuse(self, run: Run, call: dict[str, Any], code: str, reason: str, *,
                failure: bool = True, stop: bool = False, verdict: str = "DENY", decision_id: str = "") -> None:
        self.store.update_call(call["id"], status="done", verdict=verdict, code=code, decision_id=decision_id,
                               result={"is_error": True, "content": context.refusal_result(code, reason, stop=stop)})
        if failure:
            self.store.add_to_run(run.run_id, consecutive_failures=1)

    def _decide_call(self, run: Run, call: dict[str, Any]) -> bool:
        """Check one call; return False when the run stops advancing (approval, halt)."""
        if call["tool"] == context.PLAN_TOOL:
            return self._plan(run, call)
        if call["tool"] == context.DELEGATE_TOOL:
            return self._delegate(run, call)
        if call["tool"] == context.PROPOSE_TOOL:
            return self._propose_change(run, call)
        if call["tool"] in skills.BUILTINS:
            return skills.handle(self, run, call)
        if call["tool"] == context.LEARN_TOOL:  # a built-in action, never a tool of an allowlist
            lesson = self._arguments(run, call, learnings.Lesson, "the learning")
            if lesson is not None:
                learnings.propose(self, run, call, lesson)
            return True
        if not run.has_plan and not call["verifies"]:  # the plan gate is for the model's calls
            self._refuse(run, call, "plan_required", "propose a plan with propose_plan before calling tools")
            self.store.append_event(run.run_id, EventKind.CALL_REFUSED, tool=call["tool"], code="plan_required")
            return True
        plan_step = self._match_step(run, call)
        tool_call = cp.ToolCall(tool=call["tool"], arguments=to_struct(call["arguments"]), plan_step=plan_step)
        req = cp.CheckRequest(run=self._run_context(run), tool_call=tool_call,
                              counters=self._counters(run, turn_tool_calls=self._made_in_turn(run, call),
                                                      identical=self.store.identical_calls(
                                                          run.run_id, call["args_sha"], call["tool"], call["id"],
                                                          run.stretch_first_turn)))
        self._attach_approval(req, call)
        resp = self.checkpoint.check(req)
        self._record_decision(run, "tool_call", resp, tool=call["tool"], arguments=call["arguments"],
                              plan_step=plan_step, counts_as_drift=resp.counts_as_drift and not call["verifies"],
                              **({"verifies": call["verifies"]} if call["verifies"] else {}),
                              **({"learnings": [n.id for n in resp.learnings]} if resp.learnings else {}))
        if resp.counts_as_drift and not call["verifies"]:  # a goal's check is not the model wandering
            self.store.add_to_run(run.run_id, drift=1)
        if resp.verdict == _ALLOW:
            # a template tool's grant covers the arguments the checkpoint filled in: those are sent
            granted = json.dumps(struct_to_dict(resp.arguments, checked=False)) if resp.HasField("arguments") else ""
            self.store.update_call(call["id"], status="executing", decision_id=resp.decision_id, verdict="ALLOW",
                                   code=resp.code, plan_step=plan_step, grant=resp.grant.SerializeToString(),
                                   granted_arguments=granted)
            self._execute(self.store.run(run.run_id), self.store.calls(run.run_id, run.turn)[call["idx"]],
                          advice=learnings.advice(resp))
            return True
        return self._not_allowed(run, call, resp)

    def _attach_approval(self, req: cp.CheckRequest, call: dict[str, Any]) -> None:
        if call["status"] == "approved":
            approval = self.store.approval(call["approval_id"])
            req.approval.CopyFrom(cp.Approval(decision_id=approval.decision_id, token=approval.token))

    def _not_allowed(self, run: Run, call: dict[str, Any], resp: cp.CheckResponse) -> bool:
        """DENY, REQUIRE_APPROVAL or HALT of a call; False when the run stops advancing."""
        if resp.verdict == _DENY:
            self._refuse(run, call, resp.code, resp.reason, decision_id=resp.decision_id)
            return True
        if resp.verdict == _APPROVAL:
            approval_id = self.store.add_approval(run_id=run.run_id, call=call["id"], decision_id=resp.decision_id,
                                                  tool=call["tool"], arguments=call["arguments"], code=resp.code,
                                                  rule=resp.rule, reason=resp.reason)
            self.store.update_call(call["id"], status="awaiting_approval", approval_id=approval_id,
                                   decision_id=resp.decision_id, verdict="REQUIRE_APPROVAL", code=resp.code)
            # only from running: a pause that landed during the check stands (resume waits again)
            self.store.transition(run.run_id, RUNNING, AWAITING_APPROVAL, resp.code, resp.reason)
            self.store.append_event(run.run_id, EventKind.APPROVAL_REQUESTED, approval_id=approval_id, tool=call["tool"],
                                    arguments=call["arguments"], rule=resp.rule, reason=resp.reason)
            return False
        # HALT (or a verdict this driver does not know: fail closed the same way): a breaker, or a
        # handoff_if rule that gives the case to a person or queue; either way the run pauses
        handoff = resp.code == "handoff"
        breaker = resp.code.removeprefix("breaker_")
        why = "the case was handed to a person earlier in this turn" if handoff else \
            f"breaker {breaker} tripped earlier in this turn"
        self._refuse(run, call, resp.code, resp.reason, failure=False, stop=True, verdict="HALT",
                     decision_id=resp.decision_id)
        for other in self.store.calls(run.run_id, run.turn):
            if other["status"] != "done":
                self._refuse(run, other, resp.code, why, failure=False, stop=True, verdict="HALT")
                self.store.append_event(run.run_id, EventKind.CALL_REFUSED, tool=other["tool"], code=resp.code)
        self._pause(self.store.run(run.run_id), resp.code, resp.reason, **_halted(resp))
        return False

    def _match_step(self, run: Run, call: dict[str, Any]) -> str:
        steps = (run.plan or {}).get("steps") or []
        if call["plan_step"] and any(s["id"] == call["plan_step"] and s["tool"] == call["tool"] for s in steps):
            return str(call["plan_step"])
        same_tool = [s for s in steps if s["tool"] == call["tool"]]
        exact = [s for s in same_tool if s.get("arguments") is not None
                 and canonical.sha256_hex(s["arguments"]) == call["args_sha"]]
        loose = [s for s in same_tool if s.get("arguments") is None]
        chosen = (exact or loose)[:1]
        return chosen[0]["id"] if chosen else ""

    def _arguments(self, run: Run, call: dict[str, Any], model: type[_Args], what: str) -> _Args | None:
        """The call's arguments as `model`; None when they do not fit (the call is refused)."""
        try:
            return model.model_validate(call["arguments"])
        except ValidationError as exc:
            self._refuse(run, call, "malformed_response", f"{what} is not valid: {exc.errors()[0]['msg']}")
            return None

    def _plan(self, run: Run, call: dict[str, Any]) -> bool:
        plan = self._arguments(run, call, _Plan, "the plan")
        if plan is None:
            return True
        steps = [cp.PlanStep(id=s.id, tool=s.tool, description=s.description,
                             **({"arguments": to_struct(s.arguments)} if s.arguments is not None else {}))
                 for s in plan.steps]
        # a Check of the plan action (not CheckPlan), so an approval of the plan can come with it
        req = cp.CheckRequest(run=self._run_context(run), plan=cp.Plan(steps=steps), counters=self._counters(run))
        self._attach_approval(req, call)
        resp = self.checkpoint.check(req)
        self._record_decision(run, "plan", resp, steps=[s.model_dump() for s in plan.steps],
                              step_results=[{"step": r.step_id, "verdict": verdict_name(r.verdict), "code": r.code}
                                            for r in resp.plan_steps])
        if resp.verdict == _ALLOW:
            self.store.update_call(call["id"], status="done", verdict="ALLOW", code=resp.code,
                                   decision_id=resp.decision_id,
                                   result={"is_error": False, "content": context.note(
                                       f"plan accepted ({len(plan.steps)} steps); go ahead")})
            self.store.update_run(run.run_id, plan=plan.model_dump(), has_plan=1, consecutive_failures=0)
            return True
        if resp.verdict in (_HALT, _APPROVAL):
            # APPROVAL: a person reads the plan before the run goes on. HALT: like a tool call's,
            # this call and every further call of the turn are refused, never left to run on resume.
            return self._not_allowed(run, call, resp)
        refused = [f"{r.step_id}: {r.code}" for r in resp.plan_steps if r.verdict != _ALLOW]
        self._refuse(run, call, resp.code, resp.reason, stop=True)
        for other in self.store.calls(run.run_id, run.turn):
            if other["status"] != "done":
                self._refuse(run, other, "plan_refused", "the plan was refused", failure=False, stop=True)
        self._finish(run, FAILED, "plan_refused", f"the plan was refused ({resp.code}): {'; '.join(refused)}",
                     decision_code=resp.code, steps=refused)
        return False

    def _propose_change(self, run: Run, call: dict[str, Any]) -> bool:
        """An agent's proposal to change an agent: recorded by the checkpoint under the run's token;
        it waits for a tenant admin and changes nothing now. The model learns the outcome as data."""
        ask = self._arguments(run, call, _Proposal, "the proposal")
        if ask is None:
            return True
        resp = self.checkpoint.propose_agent_change(cp.ProposeAgentChangeRequest(
            agent=ask.agent, note=ask.reason, changes=to_struct(ask.changes.given()), run=self._run_context(run)))
        d = resp.decision
        self._record_decision(run, "proposal", d, agent=ask.agent, version=resp.version.version)
        if d.verdict != _ALLOW:
            self._refuse(run, call, d.code, d.reason, decision_id=d.decision_id)
            return True
        text = (f"Proposal recorded (decision {d.decision_id}): version {resp.version.version} of {ask.agent} "
                "waits for a tenant admin. Nothing changes until then; you keep your current tools.")
        self.store.update_call(call["id"], status="done", verdict="ALLOW", code=d.code, decision_id=d.decision_id,
                               result={"is_error": False, "content": text})
        return True

    def _delegate(self, run: Run, call: dict[str, Any]) -> bool:
        """Ask the checkpoint for a child run; on ALLOW start it and wait (False: stop advancing)."""
        ask = self._arguments(run, call, _Delegate, "the delegation")
        if ask is None:
            return True
        req = cp.CheckRequest(run=self._run_context(run), delegation=ask.to_proto(),
                              counters=self._counters(run, turn_tool_calls=self._made_in_turn(run, call)))
        self._attach_approval(req, call)
        resp = self.checkpoint.check(req)
        self._record_decision(run, "delegation", resp, agent=ask.agent,
                              child_agent_version=resp.child_agent_version)
        if resp.verdict != _ALLOW:
            return self._not_allowed(run, call, resp)
        # The call names its child before the child exists, and the child's row is written last:
        # a driver that stops in between finds either no child (the call is refused, nothing ran)
        # or a whole one, never two children for one delegation.
        child_id = resp.child_run_id
        self.store.update_call(call["id"], status="awaiting_child", child_run_id=child_id,
                               decision_id=resp.decision_id, verdict="ALLOW", code=resp.code)
        child = self._start_child(run, child_id, ask, req, resp)
        self.store.append_event(run.run_id, EventKind.CHILD_STARTED, child_run_id=child.run_id, agent=child.agent,
                                agent_version=child.agent_version, decision_id=resp.decision_id,
                                tools=[t["name"] for t in child.tool_specs], budget=child.budget)
        if not self.store.wait_for_child(run.run_id, call["id"],
                                         f"waiting for child run {child.run_id} ({child.agent})"):
            parent = self.store.run(run.run_id)
            # The parent was cancelled while its child was being created: the child never starts.
            if parent.status in TERMINAL:
                try:
                    self.cancel(child_id, "driver", f"its parent run {run.run_id} ended before it started")
                except RunStateError:
                    pass  # the parent's cancel already reached it
                return False
            # A person paused the parent meanwhile, perhaps before the cascade could see this child:
            # the child is held by that pause too (a no-op when the cascade got to it first).
            if parent.status == PAUSED and parent.code in (PERSON_PAUSED, PARENT_PAUSED):
                self._pause_descendants(parent, parent.paused_by)
        self.spawn(child.run_id)
        return False

    def _start_child(self, parent: Run, child_id: str, ask: _Delegate, req: cp.CheckRequest,
                     resp: cp.CheckResponse) -> Run:
        """Create the child run the checkpoint allowed: its version, authority, budget and chain."""
        resolved = self.checkpoint.resolve_agent(ask.agent, resp.child_agent_version)
        authority = set(resp.child_authority.tools)
        specs = [s for s in _tool_specs(resolved) if s["name"] in authority]
        budget = json_format.MessageToDict(resp.child_budget, preserving_proto_field_name=True)
        budget = {k: v for k, v in GoalBudget.model_validate(budget).model_dump(exclude_none=True).items() if v}
        goal = Goal(objective=ask.objective,
                    criteria=[Criterion(id=f"c{i}", description=text) for i, text in enumerate(ask.criteria, 1)],
                    constraints=[f"Delegated by agent {parent.agent} in run {parent.run_id}."],
                    budget=GoalBudget.model_validate(budget))
        options = child_options(parent.provider, parent.provider_options or {}, ask.agent)
        author = f"agent {parent.agent} (run {parent.run_id}, for {parent.owner})"
        self.store.add_goal(child_id, goal.model_dump(), author=author)
        self.store.add_transcript(child_id, {"role": "user", "text": context.goal_message(goal.model_dump(), 1)})
        child = self.store.create_run(
            run_id=child_id, agent=resolved.agent, agent_version=resp.child_agent_version, tenant=resolved.tenant,
            owner=parent.owner, mode=parent.mode, provider=parent.provider, model=parent.model,
            provider_options=options, persona=resolved.persona, tool_specs=specs,
            policy_revision=resp.policy_revision, budget=budget, delegates=list(resolved.delegates),
            parent_run_id=parent.run_id, root_run_id=parent.root_run_id or parent.run_id,
            depth=parent.depth + 1, run_token=resp.child_run_token,
            skills=skills.pinned(self.checkpoint, resp.child_run_token),
        )
        self.store.append_event(child_id, EventKind.RUN_STARTED, agent=resolved.agent, agent_version=child.agent_version,
                                owner=parent.owner, mode=parent.mode, provider=parent.provider,
                                model=parent.model, tools=[s["name"] for s in specs], budget=budget,
                                policy_revision=resp.policy_revision, parent_run_id=parent.run_id,
                                root_run_id=child.root_run_id, depth=child.depth,
                                delegation_decision_id=resp.decision_id)
        learnings.load_lessons(self, child_id)
        return child

    def _settle_child(self, child: Run) -> None:
        """A child run ended: its outcome becomes the parent's call result, and the parent goes on."""
        with self._settling:  # the child's worker and a cancel or recover may both get here
            call = self.store.call_for_child(child.run_id)
            if call is None or call["status"] == "done":
                return
            ok = child.status == SUCCEEDED
            summary = child.reason or child.code
            if child.missing:
                summary += "\nCriteria not met: " + "; ".join(child.missing)
            self.store.update_call(call["id"], status="done",
                                   result={"is_error": not ok, "content": context.child_result(child, summary)})
            parent_id = call["run_id"]
            self._count_outcome(parent_id, ok)
            self.store.append_event(parent_id, EventKind.CHILD_ENDED, child_run_id=child.run_id, agent=child.agent,
                                    status=child.status, code=child.code, reason=child.reason)
            # Waiting: it goes on. Still running (it had not begun to wait): its worker looks again.
            woken = self.store.transition(parent_id, AWAITING_CHILD, RUNNING, "", "")
            if woken or self.store.run(parent_id).status == RUNNING:
                self.spawn(parent_id)

    def _count_outcome(self, run_id: str, ok: bool) -> None:
        """A call's outcome: a success ends the run of consecutive failures, a failure extends it."""
        if ok:
            self.store.update_run(run_id, consecutive_failures=0)
        else:
            self.store.add_to_run(run_id, consecutive_failures=1)

    def _execute_when_free(self, run: Run, call: dict[str, Any], req: tr.ExecuteRequest,
                           output: OutputEvents) -> tr.Receipt:
        """Execute, retrying `runner_busy` with exponential backoff (the runner refused before
        anything started, so resending the same grant is safe)."""
        for attempt in range(self.runner_busy_retries + 1):
            # A cancel that landed while the call was decided (or between busy retries) already
            # stopped what ran for the run; a call sent after it would run for a cancelled run.
            current = self.store.run(run.run_id)
            if current.status in TERMINAL:
                raise _RunEnded(current.code or current.status)
            try:
                return self.toolrunner.execute(req, output)
            except DriverError as exc:
                if exc.code != "runner_busy" or attempt == self.runner_busy_retries or self._stopping.is_set():
                    raise
                delay = min(10.0, self.runner_busy_backoff_seconds * (2 ** attempt))
                self.store.append_event(run.run_id, EventKind.RUNNER_BUSY_RETRY, tool=call["tool"],
                                        decision_id=call["decision_id"], attempt=attempt + 1, delay=delay)
                time.sleep(delay)
        raise AssertionError("unreachable")

    def _execute(self, run: Run, call: dict[str, Any], *, advice: str = "") -> None:
        grant = cp.Grant.FromString(call["grant"])
        if grant.expires_at.seconds and grant.expires_at.seconds < now():
            # The grant lapsed (e.g. the toolrunner was down): decide again rather than run unchecked.
            self.store.update_call(call["id"], status="pending", grant=b"", granted_arguments="")
            return
        arguments = json.loads(call["granted_arguments"]) if call.get("granted_arguments") else call["arguments"]
        req = tr.ExecuteRequest(run_id=run.run_id, agent=run.agent, agent_version=run.agent_version,
                                tool=call["tool"], arguments=to_struct(arguments), grant=grant)
        output = OutputEvents(self.store, run.run_id, call["tool"], call["decision_id"])
        try:
            receipt = self._execute_when_free(run, call, req, output)
        except _RunEnded as ended:  # never sent: the checkpoint's ALLOW stays on the call, nothing ran
            self.store.update_call(call["id"], status="done", code=ended.code, result={
                "is_error": True, "content": context.refusal_result(ended.code, "the run ended before this call was sent")})
            return
        except DependencyUnavailable:
            raise
        except DriverError as exc:
            if exc.code == "runner_busy":
                # Not the call's fault and nothing ran: no failure is counted, the call keeps its
                # grant (status `executing`) and is sent again when a person resumes the run.
                self._pause(self.store.run(run.run_id), "runner_busy",
                            f"the toolrunner stayed busy through {self.runner_busy_retries} retries: {exc.message}",
                            tool=call["tool"], decision_id=call["decision_id"])
                return
            # the toolrunner refused (grant_*, image_not_allowed, policy_revision_mismatch, ...)
            self._refuse(run, call, exc.code, exc.message, decision_id=call["decision_id"])
            self.store.append_event(run.run_id, EventKind.TOOL_REFUSED, tool=call["tool"], code=exc.code,
                                    message=exc.message, decision_id=call["decision_id"])
            return
        finally:
            output.flush()  # what the tool wrote before any failure is still shown
        ok = receipt.exit_code == 0 and not receipt.code and not receipt.timed_out
        self.store.add_receipt(run.run_id, receipt.decision_id or call["decision_id"], call["tool"],
                               receipt.exit_code, receipt.code, receipt.output,
                               json_format.MessageToDict(receipt, preserving_proto_field_name=True),
                               verifies=call["verifies"])
        content = advice + context.receipt_result(call["tool"], call["decision_id"], receipt.exit_code, receipt.code,
                                                  receipt.output, receipt.truncated)
        self.store.update_call(call["id"], status="done", result={"is_error": not ok, "content": content})
        self._count_outcome(run.run_id, ok)
        self.store.append_event(run.run_id, EventKind.TOOL_RECEIPT, tool=call["tool"], decision_id=call["decision_id"],
                                exit_code=receipt.exit_code, code=receipt.code, duration=receipt.duration_seconds,
                                truncated=receipt.truncated, masked=receipt.masked_count, replayed=receipt.replayed,
                                output=receipt.output[:2000],
                                **({"verifies": call["verifies"]} if call["verifies"] else {}))
        failed = learnings.task_failure(receipt.code, receipt.exit_code, receipt.timed_out)
        if failed and not call["verifies"]:  # a failed task becomes a proposed learning
            learnings.report(self, run, cp.LEARNING_SOURCE_TASK_FAILED, failed,
                             f"{call['tool']} failed ({failed}): {receipt.output[-300:].strip()}",
                             tool=call["tool"], decision_id=call["decision_id"])
