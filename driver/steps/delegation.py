"""A delegation: the model asks for a child run of another agent. The checkpoint decides it like
any call; when it allows it, the child run starts pinned to the version the checkpoint chose,
with the child's effective authority (only those tools are offered), budget and chain token,
and the parent waits (`awaiting_child`) until children.settle_child hands it the outcome."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field

from driver import checks, context, learnings, skills
from driver.errors import RunStateError
from driver.goal import Criterion, Goal, GoalBudget
from driver.providers import child_options
from driver.runs.model import TERMINAL, EventKind, Run
from driver.steps.verdicts import attach_approval, not_allowed
from warden.checkpoint.v1 import checkpoint_pb2 as cp

if TYPE_CHECKING:
    from driver.loop import Driver


class DelegateBudget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tokens: int | None = Field(None, ge=0)
    turns: int | None = Field(None, ge=0)
    tool_calls: int | None = Field(None, ge=0)
    wall_clock_seconds: float | None = Field(None, ge=0)
    failures: int | None = Field(None, ge=0)
    spend_usd: float | None = Field(None, ge=0)


class DelegateScope(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tools: list[str] = Field(default_factory=list)
    access: list[str] = Field(default_factory=list)
    images: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)
    connections: list[str] = Field(default_factory=list)
    threads: list[str] = Field(default_factory=list)
    subjects: list[str] = Field(default_factory=list)


class Delegate(BaseModel):
    """The arguments of the `delegate` tool (see context.delegate_tool_schema)."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1)
    objective: str = Field(min_length=1)
    criteria: list[str] = Field(min_length=1)
    budget: DelegateBudget | None = None
    narrowing: DelegateScope | None = None

    def to_proto(self) -> cp.Delegation:
        d = cp.Delegation(agent=self.agent)
        if self.narrowing is not None:
            d.narrowing.CopyFrom(cp.Scope(**self.narrowing.model_dump()))
        if self.budget is not None and self.budget.model_dump(exclude_none=True):
            d.budget.CopyFrom(cp.Budget(**self.budget.model_dump(exclude_none=True)))
        return d


def delegate(driver: Driver, run: Run, call: dict[str, Any]) -> bool:
    """Ask the checkpoint for a child run; on ALLOW start it and wait (False: stop advancing)."""
    store = driver.store
    ask = checks.arguments(store, run, call, Delegate, "the delegation")
    if ask is None:
        return True
    req = cp.CheckRequest(run=checks.run_context(run), delegation=ask.to_proto(),
                          counters=checks.counters(store, run, turn_tool_calls=checks.made_in_turn(store, run, call)))
    attach_approval(store, req, call)
    resp = driver.checkpoint.check(req)
    checks.record_decision(store, run, "delegation", resp, agent=ask.agent,
                           child_agent_version=resp.child_agent_version)
    if resp.verdict != checks.ALLOW:
        return not_allowed(driver, run, call, resp)
    # The call names its child before the child exists, and the child's row is written last:
    # a driver that stops in between finds either no child (the call is refused, nothing ran)
    # or a whole one, never two children for one delegation.
    child_id = resp.child_run_id
    store.update_call(call["id"], status="awaiting_child", child_run_id=child_id,
                      decision_id=resp.decision_id, verdict="ALLOW", code=resp.code)
    child = driver._start_child(run, child_id, ask, req, resp)
    store.append_event(run.run_id, EventKind.CHILD_STARTED, child_run_id=child.run_id, agent=child.agent,
                       agent_version=child.agent_version, decision_id=resp.decision_id,
                       tools=[t["name"] for t in child.tool_specs], budget=child.budget)
    if not store.wait_for_child(run.run_id, call["id"], f"waiting for child run {child.run_id} ({child.agent})"):
        parent = store.run(run.run_id)
        # The parent was cancelled while its child was being created: the child never starts.
        if parent.status in TERMINAL:
            try:
                driver.cancel(child_id, "driver", f"its parent run {run.run_id} ended before it started")
            except RunStateError:
                pass  # the parent's cancel already reached it
            return False
        # A person paused the parent meanwhile, perhaps before the cascade could see this child:
        # the child is held by that pause too (a no-op when the cascade got to it first).
        if parent.held_by_person:
            driver._pause_descendants(parent, parent.paused_by)
    driver.spawn(child.run_id)
    return False


def start_child(driver: Driver, parent: Run, child_id: str, ask: Delegate, req: cp.CheckRequest,
                resp: cp.CheckResponse) -> Run:
    """Create the child run the checkpoint allowed: its version, authority, budget and chain."""
    store = driver.store
    resolved = driver.checkpoint.resolve_agent(ask.agent, resp.child_agent_version)
    authority = set(resp.child_authority.tools)
    specs = [s for s in checks.tool_specs(resolved) if s["name"] in authority]
    budget = json_format.MessageToDict(resp.child_budget, preserving_proto_field_name=True)
    budget = {k: v for k, v in GoalBudget.model_validate(budget).model_dump(exclude_none=True).items() if v}
    goal = Goal(objective=ask.objective,
                criteria=[Criterion(id=f"c{i}", description=text) for i, text in enumerate(ask.criteria, 1)],
                constraints=[f"Delegated by agent {parent.agent} in run {parent.run_id}."],
                budget=GoalBudget.model_validate(budget))
    options = child_options(parent.provider, parent.provider_options or {}, ask.agent)
    author = f"agent {parent.agent} (run {parent.run_id}, for {parent.owner})"
    store.add_goal(child_id, goal.model_dump(), author=author)
    store.add_transcript(child_id, {"role": "user", "text": context.goal_message(goal.model_dump(), 1)})
    child = store.create_run(
        run_id=child_id, agent=resolved.agent, agent_version=resp.child_agent_version, tenant=resolved.tenant,
        owner=parent.owner, mode=parent.mode, provider=parent.provider, model=parent.model,
        provider_options=options, persona=resolved.persona, tool_specs=specs,
        policy_revision=resp.policy_revision, budget=budget, delegates=list(resolved.delegates),
        parent_run_id=parent.run_id, root_run_id=parent.root_run_id or parent.run_id,
        depth=parent.depth + 1, run_token=resp.child_run_token,
        skills=skills.pinned(driver.checkpoint, resp.child_run_token),
    )
    store.append_event(child_id, EventKind.RUN_STARTED, agent=resolved.agent, agent_version=child.agent_version,
                       owner=parent.owner, mode=parent.mode, provider=parent.provider,
                       model=parent.model, tools=[s["name"] for s in specs], budget=budget,
                       policy_revision=resp.policy_revision, parent_run_id=parent.run_id,
                       root_run_id=child.root_run_id, depth=child.depth,
                       delegation_decision_id=resp.decision_id)
    learnings.load_lessons(driver, child_id)
    return child
