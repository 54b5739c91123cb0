"""The eleven breakers: artificial ends for a loop that has no natural one.

A breaker trips when its counter has reached its ceiling: the run has used what it may, so
this call is refused with HALT and the run pauses for a person. Ceilings only narrow: the
effective ceiling is the smallest one set among the instance, the tenant, the agent, the
run's budget, and every ancestor in the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.engine import codes
from checkpoint.engine.context import Call
from checkpoint.engine.outcome import HALT
from warden.checkpoint.v1 import checkpoint_pb2 as pb

ALL = frozenset({"tool_call", "model_call", "delegation", "plan"})
TOOL_CALL = frozenset({"tool_call"})
# A turn is counted when its model call is made; the calls that turn proposes belong to it, so
# the turn ceilings are checked before model calls only.
MODEL_CALL = frozenset({"model_call"})


@dataclass(frozen=True, slots=True)
class Breaker:
    name: str
    ceiling: str  # Budget field
    counter: str  # Counters field
    actions: frozenset[str]  # the actions it is checked before
    what: str


BREAKERS = (
    Breaker("tokens", "tokens", "stretch_tokens", ALL, "tokens used this stretch"),
    Breaker("turns", "turns", "stretch_turns", MODEL_CALL, "model turns this stretch"),
    Breaker("turns_total", "turns_total", "total_turns", MODEL_CALL, "model turns over the run's lifetime"),
    Breaker("tool_calls", "tool_calls", "turn_tool_calls", TOOL_CALL, "tool calls in this turn"),
    Breaker("wall_clock", "wall_clock_seconds", "wall_clock_seconds", ALL, "seconds of wall clock this stretch"),
    Breaker("repetition", "repetition", "identical_calls", TOOL_CALL, "identical earlier calls"),
    Breaker("failures", "failures", "consecutive_failures", ALL, "failed or denied calls in a row"),
    Breaker("drift", "drift", "drift", ALL, "calls that served no plan step"),
    Breaker("tree_budget", "tree_tokens", "tree_tokens", ALL, "tokens used by the delegation tree"),
    Breaker("spend", "spend_usd", "run_spend_usd", ALL, "USD spent by this run"),
    Breaker("provider", "provider_refusals", "provider_refusals", ALL, "refusals by the model provider"),
)
assert tuple(b.name for b in BREAKERS) == codes.BREAKERS
BUDGET_FIELDS = tuple(f.name for f in pb.Budget.DESCRIPTOR.fields)


def effective_budget(call: Call, extra: pb.Budget | None = None) -> dict[str, float]:
    """The smallest ceiling set at any level, per Budget field; absent fields are unlimited."""
    key = ("ceilings", call.tenant.name, *(link.agent.version for link in call.links))
    static = call.policies.memo.get(key)
    if static is None:  # instance, tenant and agent levels only change with the policy set
        levels: list[object] = [call.policies.instance.ceilings, call.tenant.ceilings]
        levels.extend(link.agent.budget for link in call.links)
        static = call.policies.memo[key] = _narrowest({}, levels)
    levels = [link.budget for link in call.links if link.budget is not None]
    if call.request.run.HasField("budget"):
        levels.append(call.request.run.budget)
    if extra is not None:
        levels.append(extra)
    return _narrowest(dict(static), levels) if levels else static


def _narrowest(out: dict[str, float], levels: list[object]) -> dict[str, float]:
    for level in levels:
        # In a policy file an absent ceiling is None and 0 is a real ceiling ("none at all");
        # proto3 cannot tell absent from 0, so in a request 0 means "not set here".
        is_set = (lambda v: v != 0) if isinstance(level, pb.Budget) else (lambda v: v is not None)
        for name in BUDGET_FIELDS:
            value = getattr(level, name, None)
            if value is not None and is_set(value):
                current = out.get(name)
                out[name] = value if current is None else min(current, value)
    return out


def _daily_limits(call: Call) -> tuple[tuple[str, str, float], ...]:
    """(who, counter, allowance) for the owner's and the tenant's daily spend, where one is set."""
    key = ("daily", call.tenant.name)
    found = call.policies.memo.get(key)
    if found is None:
        found = []
        for field, counter, who in (("per_owner_usd", "owner_spend_today_usd", "the accountable person"),
                                    ("tenant_usd", "tenant_spend_today_usd", f"tenant {call.tenant.name!r}")):
            limits = [v for v in (getattr(call.policies.instance.daily_spend, field),
                                  getattr(call.tenant.daily_spend, field)) if v is not None]
            if limits:
                found.append((who, counter, min(limits)))
        found = call.policies.memo[key] = tuple(found)
    return found


def check(call: Call, action: str) -> None:
    counters = call.request.counters
    trace = call.trace
    for b, ceiling in _armed(call, action):
        used = getattr(counters, b.counter)
        if used >= ceiling:
            raise trace.stop(
                HALT, codes.BREAKER_CODES[b.name], f"breaker.{b.name}",
                f"breaker {b.name} tripped: {_num(used)} {b.what}, ceiling {_num(ceiling)}; "
                "the run pauses for a person",
            )
    for who, counter, limit in _daily_limits(call):
        spent = getattr(counters, counter)
        if spent >= limit:
            raise trace.stop(
                HALT, codes.BREAKER_CODES["spend"], "breaker.spend",
                f"breaker spend tripped: {who} spent {_num(spent)} USD today, daily allowance {_num(limit)}",
            )
    if trace.enabled:
        for b in BREAKERS:
            if action in b.actions:
                trace.add(f"breaker.{b.name}", "pass")


def _armed(call: Call, action: str) -> tuple[tuple[Breaker, float], ...]:
    """The breakers checked before `action` that have a ceiling, with it. Without per-request
    budgets this depends only on the policy set and the chain, so it is worked out once."""
    dynamic = call.request.run.HasField("budget") or any(link.budget is not None for link in call.links)
    key = ("armed", action, call.tenant.name, *(link.agent.version for link in call.links))
    if not dynamic:
        found = call.policies.memo.get(key)
        if found is not None:
            return found
    ceilings = effective_budget(call)
    armed = tuple(
        (b, ceilings[b.ceiling]) for b in BREAKERS if action in b.actions and b.ceiling in ceilings
    )
    if not dynamic:
        call.policies.memo[key] = armed
    return armed


def _num(v: float) -> str:
    return f"{v:g}"
