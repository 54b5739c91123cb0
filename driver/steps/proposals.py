"""What the model proposes rather than does: its plan (checked step by step; an allowed plan opens
the gate to tool calls, a refused one fails the run) and a change to an agent's definition
(recorded for a tenant admin; nothing changes now)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from driver import checks, context
from driver.runs.model import FAILED, Run
from driver.steps.delegation import DelegateBudget, DelegateScope
from driver.steps.ends import finish_run
from driver.steps.verdicts import attach_approval, not_allowed
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import to_struct

if TYPE_CHECKING:
    from driver.loop import Driver


class PlanStep(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    arguments: dict[str, Any] | None = None
    description: str = ""


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    steps: list[PlanStep] = Field(min_length=1)


class ProposedChanges(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allowlist: list[str] | None = None
    delegates: list[str] | None = None
    persona: str | None = Field(None, min_length=1, max_length=4000)
    description: str | None = Field(None, max_length=4000)
    scope: DelegateScope | None = None
    budget: DelegateBudget | None = None

    def given(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True, exclude_defaults=True)


class Proposal(BaseModel):
    """The arguments of the `propose_agent_change` tool (see context.propose_tool_schema); what may
    change is checked again by the checkpoint, which owns the catalog."""

    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=64)
    reason: str = Field(min_length=1, max_length=1000)
    changes: ProposedChanges


def plan(driver: Driver, run: Run, call: dict[str, Any]) -> bool:
    store = driver.store
    proposed = checks.arguments(store, run, call, Plan, "the plan")
    if proposed is None:
        return True
    steps = [cp.PlanStep(id=s.id, tool=s.tool, description=s.description,
                         **({"arguments": to_struct(s.arguments)} if s.arguments is not None else {}))
             for s in proposed.steps]
    # a Check of the plan action (not CheckPlan), so an approval of the plan can come with it
    req = cp.CheckRequest(run=checks.run_context(run), plan=cp.Plan(steps=steps), counters=checks.counters(store, run))
    attach_approval(store, req, call)
    resp = driver.checkpoint.check(req)
    checks.record_decision(store, run, "plan", resp, steps=[s.model_dump() for s in proposed.steps],
                           step_results=[{"step": r.step_id, "verdict": checks.verdict_name(r.verdict),
                                          "code": r.code} for r in resp.plan_steps])
    if resp.verdict == checks.ALLOW:
        store.update_call(call["id"], status="done", verdict="ALLOW", code=resp.code,
                          decision_id=resp.decision_id,
                          result={"is_error": False, "content": context.note(
                              f"plan accepted ({len(proposed.steps)} steps); go ahead")})
        store.update_run(run.run_id, plan=proposed.model_dump(), has_plan=1, consecutive_failures=0)
        return True
    if resp.verdict in (checks.HALT, checks.APPROVAL):
        # APPROVAL: a person reads the plan before the run goes on. HALT: like a tool call's,
        # this call and every further call of the turn are refused, never left to run on resume.
        return not_allowed(driver, run, call, resp)
    refused = [f"{r.step_id}: {r.code}" for r in resp.plan_steps if r.verdict != checks.ALLOW]
    checks.refuse(store, run, call, resp.code, resp.reason, stop=True)
    for other in store.calls(run.run_id, run.turn):
        if other["status"] != "done":
            checks.refuse(store, run, other, "plan_refused", "the plan was refused", failure=False, stop=True)
    finish_run(driver, run, FAILED, "plan_refused", f"the plan was refused ({resp.code}): {'; '.join(refused)}",
               decision_code=resp.code, steps=refused)
    return False


def propose_change(driver: Driver, run: Run, call: dict[str, Any]) -> bool:
    """An agent's proposal to change an agent: recorded by the checkpoint under the run's token;
    it waits for a tenant admin and changes nothing now. The model learns the outcome as data."""
    store = driver.store
    ask = checks.arguments(store, run, call, Proposal, "the proposal")
    if ask is None:
        return True
    resp = driver.checkpoint.propose_agent_change(cp.ProposeAgentChangeRequest(
        agent=ask.agent, note=ask.reason, changes=to_struct(ask.changes.given()), run=checks.run_context(run)))
    d = resp.decision
    checks.record_decision(store, run, "proposal", d, agent=ask.agent, version=resp.version.version)
    if d.verdict != checks.ALLOW:
        checks.refuse(store, run, call, d.code, d.reason, decision_id=d.decision_id)
        return True
    text = (f"Proposal recorded (decision {d.decision_id}): version {resp.version.version} of {ask.agent} "
            "waits for a tenant admin. Nothing changes until then; you keep your current tools.")
    store.update_call(call["id"], status="done", verdict="ALLOW", code=d.code, decision_id=d.decision_id,
                      result={"is_error": False, "content": text})
    return True
