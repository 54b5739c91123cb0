"""The eleven breakers: artificial ends for a loop that has no natural one.

A breaker compares a counter with its ceiling before an action and answers HALT when it trips:
the run pauses for a person. Ceilings only narrow: the effective ceiling is the smallest one set
among the instance (its unset ceilings take the built-in defaults), the tenant, the agent, the
run's budget, and every ancestor in the chain.
"""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.engine.context import Call
from checkpoint.engine.outcome import HALT
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

# How a breaker compares before an action:
#   REACHED: trips when counter >= ceiling (the run has used what it may: this call would pass it)
#   PAST:    trips when counter >  ceiling (the call belongs to a unit the counter already holds)
#   -:       not checked before that action
# A turn is counted when its model call is allowed, so the turns counters already include the turn
# in progress when that turn's tool calls and plan come: `stretch_turns == turns` is the last
# allowed turn, and its calls run; a counter past the ceiling halts them. A delegation is the
# exception: the child it starts needs a turn of its own out of the same allowance (the turns of
# the runs below a run count into its turn breakers), so in the last turn there is none to give.
REACHED, PAST = ">=", ">"
ACTIONS = ("tool_call", "model_call", "delegation", "plan")


def _row(tool_call: str, model_call: str, delegation: str, plan: str) -> dict[str, str]:
    how = dict(zip(ACTIONS, (tool_call, model_call, delegation, plan), strict=True))
    return {action: h for action, h in how.items() if h != "-"}


R, P = REACHED, PAST


@dataclass(frozen=True, slots=True)
class Breaker:
    name: str
    ceiling: str  # Budget field
    counter: str  # Counters field
    checks: dict[str, str]  # action -> REACHED or PAST, for the actions it is checked before
    what: str
    # Counters field of the same units used by the runs below this one, added to `counter`: the
    # run's ceiling bounds its whole subtree (the driver sums; the checkpoint keeps no state)
    below: str = ""


# The one table of breaker semantics (docs/decisions.md shows the same):
#                                                   tool_call model_call delegation plan
BREAKERS = (
    Breaker("tokens", "tokens", "stretch_tokens", _row(R, R, R, R), "tokens used this stretch"),
    Breaker("turns", "turns", "stretch_turns", _row(P, R, R, P), "model turns this stretch",
            below="descendant_stretch_turns"),
    Breaker("turns_total", "turns_total", "total_turns", _row(P, R, R, P), "model turns over the run's lifetime",
            below="descendant_total_turns"),
    Breaker("tool_calls", "tool_calls", "turn_tool_calls", _row(R, "-", "-", "-"), "tool calls in this turn"),
    Breaker("wall_clock", "wall_clock_seconds", "wall_clock_seconds", _row(R, R, R, R),
            "seconds of wall clock this stretch"),
    Breaker("repetition", "repetition", "identical_calls", _row(R, "-", "-", "-"), "identical earlier calls"),
    Breaker("failures", "failures", "consecutive_failures", _row(R, R, R, R), "failed or denied calls in a row"),
    Breaker("drift", "drift", "drift", _row(R, R, R, R), "calls that served no plan step"),
    Breaker("tree_budget", "tree_tokens", "tree_tokens", _row(R, R, R, R), "tokens used by the delegation tree"),
    Breaker("spend", "spend_usd", "run_spend_usd", _row(R, R, R, R), "USD spent by this run"),
    Breaker("provider", "provider_refusals", "provider_refusals", _row(R, R, R, R), "refusals by the model provider"),
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
        static = call.policies.memo[key] = narrowest({}, levels)
    levels = [link.budget for link in call.links if link.budget is not None]
    if call.request.run.HasField("budget"):
        levels.append(call.request.run.budget)
    if extra is not None:
        levels.append(extra)
    return narrowest(dict(static), levels) if levels else static


def narrowest(out: dict[str, float], levels: list[object]) -> dict[str, float]:
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
    for b, ceiling, past in _armed(call, action):
        used = getattr(counters, b.counter)
        below = getattr(counters, b.below) if b.below else 0
        used += below
        if used > ceiling if past else used >= ceiling:
            of_them = f" ({_num(below)} of them by runs below this one)" if below else ""
            raise trace.stop(
                HALT, codes.BREAKER_CODES[b.name], f"breaker.{b.name}",
                f"breaker {b.name} tripped: {_num(used)} {b.what}{of_them}, ceiling {_num(ceiling)}; "
                "the run pauses for a person",
            )
    if counters.provider_refused_for_good and "provider_refusals" in effective_budget(call):
        raise trace.stop(
            HALT, codes.BREAKER_CODES["provider"], "breaker.provider",
            "breaker provider tripped: the provider refused for a reason retrying cannot fix "
            "(credit, quota or auth); the run pauses for a person",
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
            if action in b.checks:
                trace.add(f"breaker.{b.name}", "pass")


def turns_left(call: Call) -> dict[str, float]:
    """What a delegating run has left of each turn ceiling (Budget field -> turns): its ceiling
    minus the turns it and the runs below it used. A child is granted no more than that, so the
    turns of a whole tree stay within the ceilings of its root (the breakers' REACHED check
    before a delegation leaves at least one)."""
    ceilings, counters = effective_budget(call), call.request.counters
    return {b.ceiling: ceilings[b.ceiling] - getattr(counters, b.counter) - getattr(counters, b.below)
            for b in BREAKERS if b.below and b.ceiling in ceilings}


def _armed(call: Call, action: str) -> tuple[tuple[Breaker, float, bool], ...]:
    """The breakers checked before `action` that have a ceiling, with it and whether they trip only
    past it (PAST) rather than at it. Without per-request
    budgets this depends only on the policy set and the chain, so it is worked out once."""
    dynamic = call.request.run.HasField("budget") or any(link.budget is not None for link in call.links)
    key = ("armed", action, call.tenant.name, *(link.agent.version for link in call.links))
    if not dynamic:
        found = call.policies.memo.get(key)
        if found is not None:
            return found
    ceilings = effective_budget(call)
    armed = tuple(
        (b, ceilings[b.ceiling], b.checks[action] == PAST)
        for b in BREAKERS if action in b.checks and b.ceiling in ceilings
    )
    if not dynamic:
        call.policies.memo[key] = armed
    return armed


def _num(v: float) -> str:
    return f"{v:g}"
