"""Per-version statistics of agents, served: the `AgentStats` RPC and the Prometheus gauges.

Both read one `checkpoint.audit.stats.AgentStats` over this checkpoint's decision log, which folds
in the records committed since its last read (the first read after a start folds the whole log).
The RPC is a read, checked like the catalog's (a role in the agent's tenant) and not recorded. The
gauges are refreshed on each scrape; a scrape that cannot read the log leaves them out and logs why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from checkpoint.audit.stats import AgentStats, VersionStats
from checkpoint.policy import lifecycle
from checkpoint.policy.principals import caller_name
from checkpoint.server.catalog_acts import may_read, owning_tenant
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import PermissionDenied

if TYPE_CHECKING:
    from checkpoint.audit.port import DecisionLogStore
    from checkpoint.server.collaborators import PoliciesInForce

log = logging.getLogger("warden.checkpoint.stats")
NEVER_RAN = frozenset({lifecycle.PENDING, lifecycle.REJECTED, lifecycle.WITHDRAWN})


class AgentStatsReads:
    def __init__(self, in_force: PoliciesInForce, decisions: DecisionLogStore):
        self.in_force = in_force
        # the PostgreSQL log gives its own source; the SQLite one is read through its file
        self.stats = AgentStats(decisions.path, source=getattr(decisions, "stats_source", None))

    def agent_stats(self, request: pb.AgentStatsRequest, caller: str) -> pb.AgentStatsResponse:
        policies = self.in_force.current()
        catalog = policies.catalog
        history = catalog.history(request.agent) if request.agent else []
        tenant = owning_tenant(policies, request.agent, history) if history else ""
        if request.agent and not history:  # a version the catalog no longer has: the log says whose
            tenant = next((v.tenant for v in self.stats.current(request.agent)[1]), "")
        if not tenant or not may_read(policies, caller, tenant):
            # the same answer for an agent that does not exist and one the caller may not see
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, f"no agent {request.agent[:100]!r} that "
                                   f"{caller_name(caller)!r} may read", "agent")
        seq, versions = self.stats.current(request.agent)
        live = catalog.live_version(request.agent) or ""
        out = pb.AgentStatsResponse(agent=request.agent, tenant=tenant, live_version=live, log_seq=seq)
        seen = {v.version: v for v in versions}
        for row in history:  # the catalog's order; a version that never ran, and never will, is left out
            figures = seen.pop(row["version"], None)
            if figures is None and row["status"] in NEVER_RAN:
                continue
            out.versions.append(_message(row["version"], row["status"], live, figures))
        for figures in seen.values():  # versions only the log names, by their first record
            out.versions.append(_message(figures.version, "", live, figures))
        return out


def _message(version: str, status: str, live: str, v: VersionStats | None) -> pb.AgentVersionStats:
    if v is None:
        return pb.AgentVersionStats(version=version, status=status, live=version == live)
    return pb.AgentVersionStats(
        version=version, status=status, live=version == live, runs=v.runs, succeeded=v.succeeded,
        failed=v.failed, cancelled=v.cancelled, paused=v.paused, pauses=v.pauses, open=v.open,
        breaker_trips=v.breaker_trips, tokens=v.tokens, runs_with_tokens=v.runs_with_tokens,
        average_tokens=v.average_tokens)


# name, help, what of VersionStats
GAUGES = (
    ("runs", "Runs with at least one record of the agent version", "runs"),
    ("runs_succeeded", "Runs of the agent version whose last recorded end is succeeded", "succeeded"),
    ("runs_failed", "Runs of the agent version whose last recorded end is failed", "failed"),
    ("runs_cancelled", "Runs of the agent version whose last recorded end is cancelled", "cancelled"),
    ("runs_paused", "Runs of the agent version that paused for a person at least once", "paused"),
    ("runs_open", "Runs of the agent version with no terminal end yet", "open"),
    ("pauses", "Times runs of the agent version paused for a person", "pauses"),
    ("tokens_per_run", "Average tokens per run of the agent version, as its last end reported", "average_tokens"),
)
PREFIX = "warden_checkpoint_agent_"


class AgentStatsCollector(Collector):
    """The statistics as gauges labelled by agent and version (breaker trips also by breaker),
    computed on each scrape from what was committed since the last one."""

    def __init__(self, stats: AgentStats):
        self.stats = stats

    def describe(self) -> Iterator[GaugeMetricFamily]:
        # the names alone: registering must not read the log
        for name, help_text, _ in GAUGES:
            yield GaugeMetricFamily(PREFIX + name, help_text, labels=["agent", "version"])
        yield GaugeMetricFamily(PREFIX + "breaker_trips", "Breaker trips (HALT records) of the agent version",
                                labels=["agent", "version", "breaker"])

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            _, versions = self.stats.current()
        except Exception as exc:  # noqa: BLE001 - a scrape must not fail the other metrics
            log.error("agent statistics unavailable: %s", exc)
            return
        for name, help_text, attribute in GAUGES:
            family = GaugeMetricFamily(PREFIX + name, help_text, labels=["agent", "version"])
            for v in versions:
                family.add_metric([v.agent, v.version], float(getattr(v, attribute)))
            yield family
        trips = GaugeMetricFamily(PREFIX + "breaker_trips", "Breaker trips (HALT records) of the agent version",
                                  labels=["agent", "version", "breaker"])
        for v in versions:
            for breaker, count in sorted(v.breaker_trips.items()):
                trips.add_metric([v.agent, v.version, breaker], float(count))
        yield trips
