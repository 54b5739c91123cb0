"""Metrics every warden server has: build info, process figures, gRPC calls by method and status,
the policy revision it serves.

Each server owns its registry (never the process-wide default), so several servers in one test
process never collide. `ServerMetrics` is fed by the `warden.drain.Drain` interceptor in the driver
and the toolrunner, and by the checkpoint's own handlers through `MethodCalls`, which keeps each
method's label children so a call pays for no label lookup; `MetricsServer` serves `/metrics` and
`/healthz` on an address of their own, and refuses to start with `MetricsAddressUnavailable`
(one line, a stable code) when that address cannot be served.
"""

from __future__ import annotations

import errno
import json
import platform
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from warden.codes import METRICS_ADDRESS_UNAVAILABLE

CALL_BUCKETS = (1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                60.0, 300.0)


def version() -> str:
    try:
        return metadata.version("warden")
    except metadata.PackageNotFoundError:  # a checkout run without installing
        return "unknown"


def base_registry(process: str) -> CollectorRegistry:
    """A registry with `warden_build_info`, the process collector (CPU, RSS, open fds, start time)
    and the Python platform info."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    info = Gauge("warden_build_info", "Always 1; the labels say which build of which process runs",
                 ["process", "version", "python", "grpc"], registry=registry)
    try:
        grpc_version = metadata.version("grpcio")
    except metadata.PackageNotFoundError:
        grpc_version = "unknown"
    info.labels(process, version(), platform.python_version(), grpc_version).set(1)
    return registry


class ServerMetrics:
    """gRPC calls of one server: finished calls by method and status code, their duration, the calls
    in flight, and the calls refused while draining."""

    def __init__(self, registry: CollectorRegistry, process: str) -> None:
        self.calls = Counter(f"warden_{process}_grpc_calls", "gRPC calls finished, by method and status code",
                             ["method", "code"], registry=registry)
        self.seconds = Histogram(f"warden_{process}_grpc_call_seconds", "gRPC call duration in the handler, by method",
                                 ["method"], registry=registry, buckets=CALL_BUCKETS)
        self.in_flight = Gauge(f"warden_{process}_grpc_calls_in_flight", "gRPC calls being handled now",
                               registry=registry)
        self.draining = Gauge(f"warden_{process}_draining", "1 once a SIGTERM drain started", registry=registry)
        self.refused_draining = Counter(f"warden_{process}_grpc_refused_draining",
                                        "New calls refused because the server is draining", registry=registry)

    def finished(self, method: str, code: str, seconds: float) -> None:
        name = method.rsplit("/", 1)[-1]
        self.calls.labels(name, code).inc()
        self.seconds.labels(name).observe(seconds)

    def method(self, method: str) -> MethodCalls:
        """One method's figures with their label children resolved now, for a handler built once."""
        return MethodCalls(self, method.rsplit("/", 1)[-1])


class MethodCalls:
    """The calls of one gRPC method: the OK counter and the duration histogram are resolved once;
    a call that ends in another status (rarer) looks its counter up by name."""

    __slots__ = ("_metrics", "name", "_ok", "_seconds", "_other")

    def __init__(self, metrics: ServerMetrics, name: str) -> None:
        self._metrics = metrics
        self.name = name
        self._ok = metrics.calls.labels(name, "OK")
        self._seconds = metrics.seconds.labels(name)
        self._other: dict[str, Any] = {}

    def finished(self, code: str, seconds: float) -> None:
        if code == "OK":
            self._ok.inc()
        else:
            child = self._other.get(code)
            if child is None:
                child = self._other[code] = self._metrics.calls.labels(self.name, code)
            child.inc()
        self._seconds.observe(seconds)


def status_name(context: Any, failed: bool) -> str:
    """The status a call ended with, for its count: what it was aborted with; else OK, or, for a
    handler that raised or a stream closed under it, CANCELLED when the client had gone (a stream
    it stopped reading) and UNKNOWN otherwise (what grpc answers for an escaped exception)."""
    code = context.code()
    if code is not None:
        return str(code.name)
    if not failed:
        return "OK"
    return "UNKNOWN" if context.is_active() else "CANCELLED"


class PolicyRevision(Collector):
    """`warden_policy_revision_info{process, revision} 1`: the policy revision a process serves now,
    read at each scrape (nothing to keep current on a reload). Join it to any other series of the
    same target: `... * on(instance) group_left(revision) warden_policy_revision_info`. No sample
    while no policy set is loaded."""

    def __init__(self, process: str, revision: Callable[[], str | None]) -> None:
        self._process = process
        self._revision = revision

    def collect(self) -> Any:
        family = GaugeMetricFamily("warden_policy_revision_info",
                                   "Always 1; the revision label is the policy revision this process serves",
                                   labels=["process", "revision"])
        revision = self._revision()
        if revision:
            family.add_metric([self._process, revision], 1)
        yield family


class MetricsAddressUnavailable(OSError):
    """The metrics address is not HOST:PORT, or cannot be bound (taken, not permitted, no such host)."""

    code = METRICS_ADDRESS_UNAVAILABLE

    def __init__(self, address: str, why: str) -> None:
        super().__init__(f"cannot serve metrics on {address!r}: {why} [{self.code}]")
        self.address = address


class MetricsServer:
    """`/metrics` (Prometheus text) and `/healthz` (JSON, 200 when status is SERVING, else 503)."""

    def __init__(self, address: str, render: Callable[[], bytes], health: Callable[[], dict[str, Any]]):
        host, _, port = address.rpartition(":")
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, outer.render())
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

        self.render = render
        self.health = health
        if ":" not in address or not port.isdigit() or int(port) > 65535:
            raise MetricsAddressUnavailable(address, "give HOST:PORT, e.g. 127.0.0.1:9401 (port 0 picks a free one)")
        try:
            self.httpd = ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)
        except OSError as exc:
            why = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                why += " (another process listens there: give each process a port of its own)"
            raise MetricsAddressUnavailable(address, why) from None
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the port; also for a server bound and never started."""
        if self._thread.is_alive():
            self.httpd.shutdown()  # waits for serve_forever, which only a started server runs
        self.httpd.server_close()


def bind_first(address: str | None) -> MetricsServer | None:
    """The metrics address bound before a server starts anything else, so a taken port stops the
    start at once with `MetricsAddressUnavailable`; it answers once `start()` runs, with the
    `render` and `health` the server sets on it by then."""
    if not address:
        return None
    return MetricsServer(address, lambda: b"", lambda: {"status": "NOT_SERVING", "starting": True})


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
