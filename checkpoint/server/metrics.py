"""Prometheus metrics of one checkpoint, and the small HTTP server that exposes them.

Each server owns its registry (not the process-wide default), so several servers in one process,
as in the tests, never collide. The HTTP server also answers `/healthz` with the policy status in
JSON: the gRPC health protocol carries only SERVING / NOT_SERVING, and an operator who broke a
policy file needs to see which file and line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from warden.metrics import MetricsServer as _HttpServer
from warden.metrics import ServerMetrics, base_registry

# A decision takes tens of microseconds and a committed record about a millisecond: buckets from
# 5 us up, so the histogram can tell the two apart.
LATENCY_BUCKETS = (
    5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
)  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = base_registry("checkpoint")
        r = self.registry
        self.server = ServerMetrics(r, "checkpoint")
        self.decision_seconds = Histogram(
            "warden_checkpoint_decision_seconds",
            "Time in the decision function alone",
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.check_seconds = Histogram(
            "warden_checkpoint_check_seconds",
            "Time in the handler, by method: decision, grant and committed log record",
            ["method"],
            registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.decisions = Counter(
            "warden_checkpoint_decisions",
            "Decisions answered, by verdict and code",
            ["verdict", "code"],
            registry=r,
        )
        self.refusals = Counter(
            "warden_checkpoint_refusals", "Requests refused without a decision, by code", ["code"], registry=r
        )
        self.refusals_unrecorded = Counter(
            "warden_checkpoint_refusals_unrecorded",
            "Refusals counted but not recorded in the log: over the per-peer rate, by code",
            ["code"],
            registry=r,
        )
        self.reloads = Counter(
            "warden_checkpoint_policy_reloads",
            "Policy reloads, by result (ok, error)",
            ["result"],
            registry=r,
        )
        self.policy_loaded = Gauge(
            "warden_checkpoint_policy_loaded", "1 once a policy set is loaded and serving", registry=r
        )
        self.policy_last_reload_ok = Gauge(
            "warden_checkpoint_policy_last_reload_ok", "0 while the newest policy edit is broken", registry=r
        )
        self.policy_errors = Gauge(
            "warden_checkpoint_policy_errors",
            "Errors in the newest policy edit (0 when it loaded)",
            registry=r,
        )
        self.bundle_refusals = Counter(
            "warden_checkpoint_policy_bundle_refusals",
            "Policy bundles refused (the set in force kept serving), by code (docs/bundles.md)",
            ["code"],
            registry=r,
        )
        self.bundle_serial = Gauge(
            "warden_checkpoint_policy_bundle_serial", "The serial of the signed policy bundle in force (0: none)",
            registry=r,
        )
        self.audit_failures = Counter(
            "warden_checkpoint_audit_write_failures",
            "Decision records that could not be committed",
            registry=r,
        )
        self.grants = Counter("warden_checkpoint_grants_signed", "Grants signed", registry=r)
        self.shadow_flips = Counter(
            "warden_checkpoint_shadow_flips",
            "Recorded decisions whose shadow answer (mode: shadow rules enforced too) differs from the enforced "
            "one in verdict or code, by the two verdicts: the records `warden audit query --shadow-flips` lists",
            ["enforced", "shadow"],
            registry=r,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer(_HttpServer):
    """The checkpoint's /metrics and /healthz (the shared server, fed by its `Metrics`)."""

    def __init__(self, address: str, metrics: Metrics, health: Callable[[], dict[str, Any]]):
        super().__init__(address, metrics.render, health)
        self.metrics = metrics
