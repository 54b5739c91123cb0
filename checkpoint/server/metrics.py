"""Prometheus metrics of one checkpoint, and the small HTTP server that exposes them.

Each server owns its registry (not the process-wide default), so several servers in one process,
as in the tests, never collide. The HTTP server also answers `/healthz` with the policy status in
JSON: the gRPC health protocol carries only SERVING / NOT_SERVING, and an operator who broke a
policy file needs to see which file and line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

# A decision takes tens of microseconds and a committed record about a millisecond: buckets from
# 5 us up, so the histogram can tell the two apart.
LATENCY_BUCKETS = (
    5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
    1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1.0,
)  # fmt: skip


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
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
        self.audit_failures = Counter(
            "warden_checkpoint_audit_write_failures",
            "Decision records that could not be committed",
            registry=r,
        )
        self.grants = Counter("warden_checkpoint_grants_signed", "Grants signed", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """`/metrics` (Prometheus text) and `/healthz` (JSON) on their own address, off the gRPC port."""

    def __init__(self, address: str, metrics: Metrics, health: Callable[[], dict[str, Any]]):
        host, _, port = address.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, outer.metrics.render())
                elif self.path == "/healthz":
                    state = outer.health()
                    code = 200 if state.get("status") == "SERVING" else 503
                    self._send(code, "application/json", json.dumps(state, indent=2).encode() + b"\n")
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - scrapes are not news
                return

        self.metrics = metrics
        self.health = health
        self.httpd = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
