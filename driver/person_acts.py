"""What a person does to runs: start one, decide an approval, resume a paused run (and the runs
its pause reached), amend its goal, cancel it (and everything below it). Each act is on the
checkpoint's record before it takes effect; a status moves only from the one the act expects,
so an act that lost a race to another (a cancel, a pause) changes nothing. Pausing is in
pauses.py."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from driver import checks, context, learnings, skills
from driver.errors import DriverError, RunStateError
from driver.goal import Goal, GoalBudget
from driver.record import record_act
from driver.run_ends import correct_end, record_end
from driver.runs.model import (
    AWAITING_APPROVAL,
    CANCELLED,
    PARENT_PAUSED,
    PAUSED,
    RUNNING,
    TERMINAL,
    EventKind,
    Run,
    now,
)
from driver.steps.children import settle_child
from warden.budget import FIELDS as BUDGET_FIELDS
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.tokens import APPROVAL_LABEL, TokenExpired, TokenInvalid, key_id_of, verify

if TYPE_CHECKING:
    from driver.loop import Driver


def start_run(driver: Driver, agent: str, goal: Goal, *, owner: str, mode: str, provider: str, model: str,
              provider_options: dict[str, Any] | None, agent_version: str, spawn: bool,
              inputs: dict[str, Any] | None) -> Run:
    # The checkpoint begins the run: it records the decision, pins the version, mints the run id
    # and the run token every later check presents. A refusal starts nothing.
    store = driver.store
    request = cp.StartRunRequest(agent=agent, agent_version=agent_version, person=owner,
                                 mode=cp.RUN_MODE_BACKGROUND if mode == "background" else cp.RUN_MODE_INTERACTIVE)
    if inputs:
        request.inputs.update(inputs)
    started = driver.checkpoint.start_run(request)
    if started.decision.verdict != checks.ALLOW:
        raise RunStateError(f"the checkpoint refused to start the run: {started.decision.reason}",
                            code=started.decision.code or "run_refused")
    resolved = started.agent
    budget = goal.budget.model_dump(exclude_none=True)
    run = store.create_run(
        run_id=started.run_id, run_token=started.run_token,
        agent=resolved.agent, agent_version=resolved.agent_version, tenant=resolved.tenant, owner=owner,
        mode=mode, provider=provider, model=model or provider, provider_options=provider_options or {},
        persona=resolved.persona, tool_specs=checks.tool_specs(resolved), policy_revision=resolved.policy_revision,
        budget=budget, delegates=list(resolved.delegates),
        skills=skills.pinned(driver.checkpoint, started.run_token),  # what its token lets it load
    )
    run_id = run.run_id
    store.add_goal(run_id, goal.model_dump(), author=owner)
    store.add_transcript(run_id, {"role": "user", "text": context.goal_message(goal.model_dump(), 1)})
    store.append_event(run_id, EventKind.RUN_STARTED, agent=resolved.agent, agent_version=resolved.agent_version,
                       owner=owner, mode=mode, provider=provider, model=run.model,
                       tools=[s["name"] for s in run.tool_specs], budget=budget,
                       policy_revision=resolved.policy_revision)
    learnings.load_lessons(driver, run_id)  # lessons about this agent, as data from the catalog
    if spawn:
        driver.spawn(run_id)
    return store.run(run_id)


def approve(driver: Driver, approval_id: str, person: str, note: str, *, approval_token: str,
            spawn: bool) -> Run:
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
    approval = driver.store.approval(approval_id)
    claims: dict[str, Any] | None
    try:
        claims = _verified_approval(driver, approval_token)
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
    return decide_approval(driver, approval_id, person, note, approved=True, spawn=spawn, token=approval_token)


def _verified_approval(driver: Driver, token: str) -> dict[str, Any]:
    """The claims of an approval token the checkpoint signed and that is alive; TokenInvalid
    otherwise. A key id not in the set known here asks the checkpoint for its set again once
    (a rotation); an unreachable checkpoint is DependencyUnavailable: nothing is approved."""
    keys = driver._token_keys
    if key_id_of(token) not in keys:
        keys = driver._token_keys = driver.checkpoint.token_keys()
    return verify(token, APPROVAL_LABEL, keys.get, time.time())


def decide_approval(driver: Driver, approval_id: str, person: str, note: str, *, approved: bool,
                    spawn: bool, token: str = "", checkpoint_decision_id: str = "") -> Run:
    store = driver.store
    if not person:
        raise RunStateError("an approval needs the person's id", code="person_required")
    approval = store.approval(approval_id)
    run = store.run(approval.run_id)
    if run.status != AWAITING_APPROVAL:
        raise RunStateError(f"run {run.run_id} is {run.status}, not awaiting approval",
                            code="run_not_awaiting_approval")
    approval = store.decide_approval(approval_id, "approved" if approved else "rejected", person, note, token=token)
    reason = f"a person ({person}) rejected this call" + (f": {note}" if note else "")
    model_call = approval.tool == checks.MODEL_CALL_APPROVAL
    if model_call:
        pass  # no call row: an approved model call is attached to the next turn's check
    elif approved:
        store.update_call(approval.call, status="approved")
    else:
        store.update_call(approval.call, status="done", verdict="REJECTED", code="approval_rejected",
                          result={"content": context.refusal_result("approval_rejected", reason), "is_error": True})
        store.add_to_run(run.run_id, consecutive_failures=1)
    store.append_event(run.run_id, EventKind.APPROVAL_DECIDED, approval_id=approval_id,
                       decision="approved" if approved else "rejected", person=person, note=note,
                       tool=approval.tool, checkpoint_decision_id=checkpoint_decision_id or None)
    if model_call and not approved:
        # without the model the run cannot go on: it waits for a person (amend, resume or cancel)
        record_end(driver.checkpoint, store, run.run_id, PAUSED, "approval_rejected", reason)
        if store.transition(run.run_id, AWAITING_APPROVAL, PAUSED, "approval_rejected", reason):
            store.append_event(run.run_id, EventKind.RUN_PAUSED, code="approval_rejected", reason=reason)
        else:
            correct_end(driver.checkpoint, store, run.run_id, PAUSED)
        return store.run(run.run_id)
    # Only from awaiting_approval: a cancel that landed meanwhile stays a cancel.
    if store.transition(run.run_id, AWAITING_APPROVAL, RUNNING, "", "") and spawn:
        driver.spawn(run.run_id)
    return store.run(run.run_id)


def resume_with_children(driver: Driver, run_id: str, person: str, reply: str = "",
                         raise_budget: dict[str, Any] | None = None, *, spawn: bool = True,
                         with_parent: str = "") -> tuple[Run, list[Run]]:
    store = driver.store
    run = store.run(run_id)
    if run.status != PAUSED:
        raise RunStateError(f"run {run_id} is {run.status}, not paused", code="run_not_paused")
    if not person:
        raise RunStateError("a resume needs the person's id", code="person_required")
    if run.code == PARENT_PAUSED and run.parent_run_id and store.run(run.parent_run_id).status == PAUSED:
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
    record_act(driver, run, "resume", person, reply, raised=raise_budget, **cascade)
    # Only from paused: a cancel (or another resume) that landed meanwhile wins.
    if not store.transition(run_id, PAUSED, RUNNING, "", ""):
        current = store.run(run_id).status
        raise RunStateError(f"run {run_id} is {current}, not paused", code="run_not_paused")
    # A pause left open while the run was paused anyway (its checkpoint answer was lost) is
    # settled by this later act: a restart must not apply it to the resumed run.
    store.void_open_pauses(run_id)
    store.update_run(run_id, budget=budget, note=note, paused_by="",
                     stretch_started_at=now(), stretch=run.stretch + 1, stretch_first_turn=run.turn + 1,
                     drift=0, stretch_tokens=0,
                     stretch_turns=0, descendant_stretch_turns=0, provider_refusals=0, provider_refused_for_good=0,
                     consecutive_failures=0, nudged=0, final=None)
    store.append_event(run_id, EventKind.RUN_RESUMED, person=person, reply=reply, raised=raise_budget,
                       agent_version=run.agent_version, **cascade)
    if spawn:
        driver.spawn(run_id)
    resumed: list[Run] = []
    for child in store.children(run_id):  # parents first: a child that ends finds its parent going
        if child.status != PAUSED or child.code != PARENT_PAUSED:
            continue
        try:
            got, below = resume_with_children(driver, child.run_id, person, spawn=spawn, with_parent=run_id)
        except DriverError as exc:
            store.append_event(run_id, EventKind.CHILD_NOT_RESUMED, child_run_id=child.run_id, code=exc.code,
                               message=exc.message)
            continue
        resumed += [got, *below]
    return store.run(run_id), resumed


def amend_goal(driver: Driver, run_id: str, goal: Goal, person: str) -> int:
    store = driver.store
    run = store.run(run_id)
    if run.status in TERMINAL:
        raise RunStateError(f"run {run_id} is {run.status}", code=f"run_{run.status}")
    # The same rule as resume: the lifetime ceiling can be lowered or set, never raised or lifted.
    current = (run.budget or {}).get("turns_total")
    wanted = goal.budget.turns_total
    if current is not None and wanted is not None and wanted > current:
        raise RunStateError(f"turns_total is the run's lifetime ceiling ({current}); an amendment "
                            f"cannot raise it to {wanted}", code="turns_total_fixed")
    record_act(driver, run, "amend", person, "", goal_version=run.goal_version + 1,
               budget=goal.budget.model_dump(exclude_none=True))
    version = store.add_goal(run_id, goal.model_dump(), author=person)
    store.update_run(run_id, goal_version=version, budget={**(run.budget or {}),
                                                           **goal.budget.model_dump(exclude_none=True)})
    store.update_run(run_id, note=context.goal_message(goal.model_dump(), version))
    store.append_event(run_id, EventKind.GOAL_AMENDED, version=version, person=person)
    return version


def cancel(driver: Driver, run_id: str, person: str, reason: str = "") -> Run:
    store = driver.store
    run = store.run(run_id)
    if run.status in TERMINAL:
        raise RunStateError(f"run {run_id} is already {run.status}", code=f"run_{run.status}")
    reason = reason or f"cancelled by {person}"
    # A cancel only narrows: when the checkpoint cannot record it, it still happens (and says so).
    record_act(driver, run, "cancel", person, reason, required=False)
    record_end(driver.checkpoint, store, run_id, CANCELLED, "cancelled", reason)
    # The status first (it stops the worker); the final event last, once everything that ran
    # for the run was stopped, so a watcher reads the whole story before the end.
    if not store.set_status(run_id, CANCELLED, "cancelled", reason):
        correct_end(driver.checkpoint, store, run_id, CANCELLED)
        current = store.run(run_id).status  # it ended meanwhile: that end stands
        raise RunStateError(f"run {run_id} is already {current}", code=f"run_{current}")
    for child in store.children(run_id):  # nothing keeps running for a cancelled run
        if child.status not in TERMINAL:
            try:
                cancel(driver, child.run_id, person, f"its parent run {run_id} was cancelled")
            except RunStateError:
                pass  # it ended meanwhile: nothing left to stop
    for a in store.approvals(run_id, status="pending"):
        try:
            store.decide_approval(a.approval_id, "cancelled", person, "run cancelled")
        except RunStateError:
            pass  # a person decided it meanwhile: the run is cancelled all the same, nothing of it runs
    stopped = 0
    try:
        stopped = driver.toolrunner.cancel(run_id)
    except DriverError as exc:  # the run is cancelled either way; say what could not be stopped
        store.append_event(run_id, EventKind.CANCEL_INCOMPLETE, code=exc.code, message=exc.message)
    store.append_event(run_id, EventKind.RUN_CANCELLED, code="cancelled", reason=reason, person=person,
                       stopped_calls=stopped)
    if run.parent_run_id:
        settle_child(driver, store.run(run_id))
    return store.run(run_id)
