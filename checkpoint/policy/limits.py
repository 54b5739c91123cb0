"""Limits that need memory across runs: the Instance's `limits`, compiled, and the counts one request
reads.

A limit counts the calls of some tools, or the spend of model calls, per principal, tenant, agent or
person, in fixed windows of the checkpoint's clock. The counts live in a store every replica shares
(checkpoint/server/limit_store.py); decide() is pure, so the counts a call needs are read before it
runs (`LimitUsage`, as pinned.py reads pinned versions) and the call is counted after an ALLOW, by a
conditional increment in the store that a second replica cannot also win.

Spend is counted in millionths of a USD (`UNITS_PER_USD`): whole numbers, added exactly by both
databases. A model call is priced at its worst case: its input tokens and its `max_tokens` of output,
at the model's `model_prices` (a model with no price at the highest listed one, as the driver's
spend breaker prices it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoint.cel import CelType
from checkpoint.cel.shapes import Obj
from checkpoint.policy import model
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

UNITS_PER_USD = 1_000_000
WINDOW_UNITS = {"m": 60, "h": 3600, "d": 86400}
MAX_WINDOW_SECONDS = 31 * 86400  # the counts of a longer window would outlive any retention worth having


def window_seconds(text: str) -> int:
    """`30m`, `1h`, `24h`, `7d` in seconds (the schema allows only such text)."""
    return int(text[:-1]) * WINDOW_UNITS[text[-1]]


@dataclass(frozen=True, slots=True)
class CompiledLimit:
    spec: model.Limit
    window: int  # seconds
    max_units: int  # calls, or millionths of a USD
    code: str

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def spend(self) -> bool:
        return self.spec.counts == "spend"

    def key(self, principal: str, tenant: str, agent: str, person: str) -> str:
        """Whose count a call adds to: "" when the call has no such party (a person's own call, for a
        limit per agent), and then the limit does not count it. The kind is part of the key, so a
        principal and a tenant of the same name never share one."""
        value = {"principal": principal, "tenant": tenant, "agent": agent, "person": person}[self.spec.per]
        return f"{self.spec.per}:{value}" if value else ""

    def window_start(self, at: datetime) -> int:
        """The Unix second the window holding `at` began: windows are fixed, counted from the epoch."""
        seconds = math.floor(at.timestamp())
        return seconds - seconds % self.window

    def shown(self, units: int) -> int | float:
        """Units as rules and reasons read them: calls, or USD."""
        return units / UNITS_PER_USD if self.spend else units

    def shape(self) -> Obj:
        kind = CelType.DOUBLE if self.spend else CelType.INT
        return Obj("LimitUse", f"limits.{self.name}", (("used", kind), ("remaining", kind), ("max", kind)))


def spend_units(prices: Mapping[str, model.ModelPrice], call: pb.ModelCall) -> int:
    """A model call's worst-case price in millionths of a USD (per-million-token prices times tokens)."""
    price = prices.get(call.model)
    if price is None:
        if not prices:
            return 0
        pin = max(p.input_per_mtok_usd for p in prices.values())
        pout = max(p.output_per_mtok_usd for p in prices.values())
    else:
        pin, pout = price.input_per_mtok_usd, price.output_per_mtok_usd
    return math.ceil(max(call.input_tokens, 0) * pin + max(call.max_tokens, 0) * pout)


@dataclass(frozen=True)
class LimitSet:
    """The compiled limits of one policy set, indexed so that a call no limit names costs a lookup."""

    limits: tuple[CompiledLimit, ...] = ()
    prices: Mapping[str, model.ModelPrice] = field(default_factory=dict)
    by_tool: dict[str, tuple[CompiledLimit, ...]] = field(init=False)
    every_tool: tuple[CompiledLimit, ...] = field(init=False)
    spend: tuple[CompiledLimit, ...] = field(init=False)

    def __post_init__(self) -> None:
        by_tool: dict[str, list[CompiledLimit]] = {}
        for limit in self.limits:
            if limit.spec.counts == "calls":
                for tool in limit.spec.tools:
                    by_tool.setdefault(tool, []).append(limit)
        object.__setattr__(self, "by_tool", {k: tuple(v) for k, v in by_tool.items()})
        object.__setattr__(self, "every_tool", tuple(
            lim for lim in self.limits if lim.spec.counts == "calls" and not lim.spec.tools))
        object.__setattr__(self, "spend", tuple(lim for lim in self.limits if lim.spend))

    def applying(self, request: pb.CheckRequest) -> tuple[CompiledLimit, ...]:
        """The limits that count this request (none for a delegation or a plan)."""
        action = request.WhichOneof("action")
        if action == "tool_call":
            named = self.by_tool.get(request.tool_call.tool, ())
            return (*self.every_tool, *named) if self.every_tool else named
        if action == "model_call":
            return self.spend
        return ()

    def amount(self, limit: CompiledLimit, request: pb.CheckRequest) -> int:
        """What the request adds to `limit`'s count when it is allowed."""
        return spend_units(self.prices, request.model_call) if limit.spend else 1

    def shape(self) -> Obj:
        """`limits` as rules read it: one object per limit, by name (typed at load: a misspelt name
        is a load error)."""
        named = {lim.name: lim.shape() for lim in reversed(self.limits)}  # a name given twice is a load error
        return Obj("Limits", "limits", tuple(reversed(named.items())),
                   hint=": no limit of that name in the Instance's limits")


NO_LIMITS = LimitSet()


@dataclass(frozen=True, slots=True)
class Use:
    """One limit's count for one request, as read before the decision."""

    limit: CompiledLimit
    key: str  # "" when the limit does not count this request's party
    window_start: int
    used: int  # units counted in the window when read
    amount: int  # what this request adds when allowed; 0 when the limit does not count it

    @property
    def remaining(self) -> int:
        return max(self.limit.max_units - self.used, 0)

    @property
    def exceeded(self) -> bool:
        return self.amount > 0 and self.used + self.amount > self.limit.max_units

    def cel(self) -> dict[str, Any]:
        shown = self.limit.shown
        return {"used": shown(self.used), "remaining": shown(self.remaining), "max": shown(self.limit.max_units)}

    def described(self) -> str:
        """`NAME USED/MAX per KEY in WINDOW` for reasons and records."""
        shown = self.limit.shown
        return (f"{self.limit.name} {shown(self.used)}/{shown(self.limit.max_units)} per {self.key or self.limit.spec.per}"
                f" in {self.limit.spec.window}")


@dataclass(frozen=True)
class LimitUsage:
    """The counts one request read: every limit that counts it, and, when a rule that applies reads
    `limits`, every other limit too (its count for this request's party, adding nothing)."""

    uses: tuple[Use, ...] = ()

    def counted(self) -> tuple[Use, ...]:
        """The uses this request adds to when allowed."""
        return tuple(u for u in self.uses if u.amount > 0)

    def cel_map(self) -> dict[str, Any]:
        return {u.limit.name: u.cel() for u in self.uses}


NOTHING = LimitUsage()


def compiled(specs: Iterable[model.Limit], prices: Mapping[str, model.ModelPrice]) -> LimitSet:
    """The limits as the loader checked them (loader/limits.py)."""
    out = []
    for spec in specs:
        units = round(spec.max * UNITS_PER_USD) if spec.counts == "spend" else int(spec.max)
        out.append(CompiledLimit(spec, window_seconds(spec.window), units, spec.code or codes.LIMIT_EXCEEDED))
    return LimitSet(tuple(out), dict(prices))
