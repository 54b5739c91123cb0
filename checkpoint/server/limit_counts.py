"""The limits across runs around one Check: their counts read before decide(), the call counted
after an ALLOW, and given back when that answer then became a refusal.

Reading: only the limits that count this call (a dict lookup by tool or action), and every other one
too when a rule that applies reads `limits`; a call nothing names makes no round trip to the store.
Counting: the store's conditional increment (limit_store.py) is what decides a race. The count the
decision read may be stale by then (another replica counted meanwhile): when the increment finds no
room, the answer becomes the limit's refusal, before the record, so the record says what was
answered. A store that cannot be read or written refuses the call (`limit_unavailable`).

Windows are taken from the decision time, `now` of the Check (the checkpoint's clock), so every
step of one decision reads the same window; replicas whose clocks differ by a second may disagree
on a window's edge by that second.
"""

from __future__ import annotations

import logging
from datetime import datetime

from checkpoint.engine.limits import refusal
from checkpoint.policy import PolicySet
from checkpoint.policy.limits import NOTHING, CompiledLimit, LimitUsage, Use
from checkpoint.server.answers import fail_closed
from checkpoint.server.limit_store import Bucket, Increment, LimitStore
from checkpoint.server.runs import Established, Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

log = logging.getLogger("warden.checkpoint.limits")


def _reads_limits(policies: PolicySet, request: pb.CheckRequest) -> bool:
    """Does a rule that can apply to this action read `limits` (a shadow rule too: its answer is
    recorded beside the enforced one)?"""
    action = request.WhichOneof("action")
    for view in (policies, policies.shadow()) if policies.has_shadow else (policies,):
        group = (view.rules_by_tool.get(request.tool_call.tool) if action == "tool_call"
                 else view.rules_by_action.get(action or ""))
        if group is not None and "limits" in group.reads:
            return True
    return False


def bucket(limit: CompiledLimit, key: str, window_start: int) -> Bucket:
    """Where a count is kept: by the limit's name and its window's length too, so that a window
    edited from 1h to 24h starts counting afresh instead of inheriting the hour that began with it."""
    return Bucket(f"{limit.name}/{limit.spec.window}", key, window_start)


def _increments(usage: LimitUsage) -> list[Increment]:
    return [Increment(bucket(u.limit, u.key, u.window_start), u.amount, u.limit.max_units,
                      u.window_start + u.limit.window) for u in usage.counted()]


class LimitCounts:
    """The service's side of the limits: `store` None (a service built without one) refuses every
    call a limit counts or a rule reads, rather than allow it uncounted."""

    def __init__(self, store: LimitStore | None):
        self.store = store

    def read(self, policies: PolicySet, request: pb.CheckRequest, principal: str, established: Established,
             now: datetime) -> LimitUsage:
        """The counts this call needs, for decide(). Raises Refused(limit_unavailable)."""
        limits = policies.limits
        if not limits.limits:
            return NOTHING
        applying = limits.applying(request)
        wanted: tuple[CompiledLimit, ...] = limits.limits if _reads_limits(policies, request) else applying
        if not wanted:
            return NOTHING
        chain = established.run.actor_chain
        person = chain[0].id if chain else ""
        counted = {id(lim) for lim in applying}
        uses = []
        for limit in wanted:
            key = limit.key(principal, established.run.tenant, established.agent, person)
            amount = limits.amount(limit, request) if key and id(limit) in counted else 0
            uses.append((limit, key, limit.window_start(now), amount))
        if self.store is None:
            raise Refused(codes.LIMIT_UNAVAILABLE, "this checkpoint has no store for its limits", "limits")
        try:
            found = self.store.used([bucket(lim, key, start) for lim, key, start, _ in uses if key])
        except Exception as exc:
            log.error("the limits' counts could not be read: %s", exc)
            raise Refused(codes.LIMIT_UNAVAILABLE, "the limits' counts cannot be read now; nothing was counted",
                          "limits") from None
        return LimitUsage(tuple(Use(lim, key, start, found.get(bucket(lim, key, start), 0), amount)
                                for lim, key, start, amount in uses))

    def count(self, usage: LimitUsage, now: datetime, response: pb.CheckResponse) -> tuple[pb.CheckResponse, bool]:
        """Count an allowed call: (the answer, whether it was counted). Counted, the answer's reason
        (so its record) says in which counts ("; counted: NAME USED/MAX per KEY in WINDOW"); when
        another decision took the last of a limit since the read, the answer becomes that limit's
        refusal, before the record; when the store fails, `limit_unavailable`."""
        increments = _increments(usage)
        if not increments:
            return response, False
        try:
            assert self.store is not None  # read() refused already without one
            missed, totals = self.store.count(increments, int(now.timestamp()))
        except Exception as exc:
            log.error("an allowed call could not be counted: %s", exc)
            return fail_closed(response, codes.LIMIT_UNAVAILABLE, "the call could not be counted against its "
                               "limits now; nothing was counted", rule="limits"), False
        if missed is None:
            response.reason += counted_note(usage, totals)
            return response, True
        use = next(u for u in usage.counted() if bucket(u.limit, u.key, u.window_start) == missed)
        limit = use.limit
        refused = fail_closed(response, limit.code, f"limit {limit.name} ({limit.shown(limit.max_units)} per {use.key} "
                              f"in {limit.spec.window}) was reached by another decision after this one read its "
                              "count; nothing was counted", rule=f"limit:{limit.name}")
        refused.verdict = refusal(limit.spec.verdict)
        return refused, False

    def refund(self, usage: LimitUsage) -> None:
        """Give back what an allowed call counted when its answer then became a refusal."""
        increments = _increments(usage)
        if not increments or self.store is None:
            return
        try:
            self.store.refund(increments)
        except Exception as exc:  # the count stays high: stricter, never looser
            log.error("a refused call's count could not be given back: %s", exc)


def counted_note(usage: LimitUsage, totals: dict[Bucket, int]) -> str:
    """What the answer's reason (and so the record) says of the limits an allowed call was counted in."""
    parts = []
    for use in usage.counted():
        shown = use.limit.shown
        total = totals.get(bucket(use.limit, use.key, use.window_start), use.used + use.amount)
        parts.append(f"{use.limit.name} {shown(total)}/{shown(use.limit.max_units)} per {use.key} "
                     f"in {use.limit.spec.window}")
    return "; counted: " + ", ".join(parts)
