"""What every step of a run does around a check: the run context and counters the checkpoint
decides with, the decision's event, a call refused as data for the model, and a call's outcome
counted. Shared by the loop's steps and the built-in tools (skills, learnings)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from driver import context
from driver.runs.model import EventKind, Run, now
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import struct_to_dict

if TYPE_CHECKING:
    from driver.runs.store import RunStore

ALLOW, DENY, APPROVAL, HALT = (cp.VERDICT_ALLOW, cp.VERDICT_DENY, cp.VERDICT_REQUIRE_APPROVAL, cp.VERDICT_HALT)
# the `tool` of an approval that is a model call's, not a tool call's (no call row of its own)
MODEL_CALL_APPROVAL = "(model call)"

_Args = TypeVar("_Args", bound=BaseModel)


def verdict_name(v: int) -> str:
    return cp.Verdict.Name(v).removeprefix("VERDICT_")


def halted(resp: cp.CheckResponse) -> dict[str, Any]:
    """What a HALT's pause event names: the breaker that tripped, or whom the case was handed to."""
    if resp.code == "handoff":
        return {"handoff_to": resp.handoff_to, "rule": resp.rule}
    return {"breaker": resp.code.removeprefix("breaker_")}


def tool_specs(resolved: cp.ResolveAgentResponse) -> list[dict[str, Any]]:
    """The tools a resolved agent version is offered, as the run pins them."""
    specs = [{"name": s.name, "description": s.description, "access": s.access,
              "input_schema": struct_to_dict(s.input_schema, checked=False),
              **({"templates": s.templates} if s.templates else {})} for s in resolved.tool_specs]
    if not specs and resolved.tools:
        specs = [{"name": n, "description": "", "access": "", "input_schema": {"type": "object"}}
                 for n in resolved.tools]
    return specs


def run_context(run: Run) -> cp.RunContext:
    """The run token says who acts for whom; the driver adds what it keeps: the person's budget
    for the run (a child's granted one is bound in its token) and whether a plan is approved."""
    budget = cp.Budget(**(run.budget or {}))  # a key the wire does not know is an error, never dropped
    return cp.RunContext(run_token=run.run_token, budget=budget, has_plan=bool(run.has_plan))


def counters(store: RunStore, run: Run, *, turn_tool_calls: int = 0, identical: int = 0) -> cp.Counters:
    owner_spend, tenant_spend = store.spend_today(run.owner, run.tenant)
    tree_runs, tree_tokens = store.tree(run.root_run_id or run.run_id)
    return cp.Counters(
        stretch_tokens=run.stretch_tokens, stretch_turns=run.stretch_turns,
        total_turns=run.total_turns, turn_tool_calls=turn_tool_calls,
        wall_clock_seconds=max(0.0, now() - run.stretch_started_at), identical_calls=identical,
        consecutive_failures=run.consecutive_failures, drift=run.drift, tree_tokens=tree_tokens,
        owner_spend_today_usd=owner_spend, tenant_spend_today_usd=tenant_spend,
        provider_refusals=run.provider_refusals, children=len(store.children(run.run_id)),
        provider_refused_for_good=bool(run.provider_refused_for_good),
        tree_runs=tree_runs, run_spend_usd=run.spend_usd,
        descendant_stretch_turns=run.descendant_stretch_turns,
        descendant_total_turns=run.descendant_total_turns,
    )


def record_decision(store: RunStore, run: Run, action: str, resp: cp.CheckResponse, **extra: Any) -> None:
    store.append_event(run.run_id, EventKind.DECISION, action=action, verdict=verdict_name(resp.verdict),
                       code=resp.code, rule=resp.rule, reason=resp.reason, decision_id=resp.decision_id, **extra)


def open_calls(store: RunStore, run: Run) -> list[dict[str, Any]]:
    return [c for c in store.calls(run.run_id, run.turn) if c["status"] != "done"]


def made_in_turn(store: RunStore, run: Run, call: dict[str, Any]) -> int:
    return sum(1 for c in store.calls(run.run_id, run.turn) if c["status"] == "done" and c["idx"] < call["idx"])


def deadline_of(resp: cp.CheckResponse) -> float:
    """The Unix seconds a REQUIRE_APPROVAL waits until (its `approval_deadline`); 0 when it names none."""
    return resp.approval_deadline.ToMicroseconds() / 1e6 if resp.HasField("approval_deadline") else 0.0


def refuse(store: RunStore, run: Run, call: dict[str, Any], code: str, reason: str, *,
           failure: bool = True, stop: bool = False, verdict: str = "DENY", decision_id: str = "") -> None:
    store.update_call(call["id"], status="done", verdict=verdict, code=code, decision_id=decision_id,
                      result={"is_error": True, "content": context.refusal_result(code, reason, stop=stop)})
    if failure:
        store.add_to_run(run.run_id, consecutive_failures=1)


def count_outcome(store: RunStore, run_id: str, ok: bool) -> None:
    """A call's outcome: a success ends the run of consecutive failures, a failure extends it."""
    if ok:
        store.update_run(run_id, consecutive_failures=0)
    else:
        store.add_to_run(run_id, consecutive_failures=1)


def arguments(store: RunStore, run: Run, call: dict[str, Any], model: type[_Args], what: str) -> _Args | None:
    """The call's arguments as `model`; None when they do not fit (the call is refused)."""
    try:
        return model.model_validate(call["arguments"])
    except ValidationError as exc:
        refuse(store, run, call, "malformed_response", f"{what} is not valid: {exc.errors()[0]['msg']}")
        return None
