"""SIGTERM drain, shared by the three servers.

grpc's own `server.stop(grace)` stops answering health at the same instant it refuses new calls, so
a load balancer or a kubelet never sees NOT_SERVING, and after the grace it cancels calls whose
handler threads go on running while the server closes its database under them. Instead a
`Drain` interceptor counts the calls in flight and, once draining, refuses new ones itself with
UNAVAILABLE `server_draining`, while health (NOT_SERVING) and reflection still answer. `drain()`
then waits for the calls in flight, up to the grace period; only after that the server stops and
the caller closes its log.

grpc's stop also cancels every call that has reached the server but not yet a handler (and those
arriving before the clients see its GOAWAY): such a call ends CANCELLED, which no retry policy
retries. So the server stops only once it has been quiet for `QUIET_SECONDS` (no call arrived,
every one arriving was refused with `server_draining` and its client went elsewhere), or when
the grace runs out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from warden.cli import DEFAULT_GRACE as DEFAULT_GRACE
from warden.metrics import ServerMetrics, status_name

log = logging.getLogger("warden.drain")

DRAINING_CODE = "server_draining"
# Longer than a loaded machine takes to hand an arrived call to a handler: a call grpc holds
# that long unseen at the stop would still be cancelled.
QUIET_SECONDS = 0.5
# Health and reflection answer while draining: that is how the outside learns to stop sending.
_ALWAYS = ("/grpc.health.v1.Health/", "/grpc.reflection.")


class Drain(grpc.ServerInterceptor):
    """Counts calls in flight, refuses new ones once draining. With `metrics`, also counts refusals,
    and with `per_call` every finished call by method and status code with its duration (the
    checkpoint has no interceptor on its hot path: it counts its calls in its own handlers, which
    ask this gate too, through `warden.metrics.MethodCalls`)."""

    def __init__(self, metrics: ServerMetrics | None = None, *, per_call: bool = True,
                 on_refused: Callable[[str], None] | None = None) -> None:
        self._lock = threading.Condition()
        self._in_flight = 0
        self._last_arrival = 0.0  # monotonic time the last call reached the gate
        self.draining = False
        self._on_refused = on_refused
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}
        self.metrics = metrics
        self.per_call = per_call and metrics is not None
        if metrics is not None:
            metrics.in_flight.set_function(lambda: self._in_flight)  # read at scrape: no per-call cost

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def enter(self) -> bool:
        """Count a call in flight; False (nothing counted) once draining: refuse it then."""
        with self._lock:
            self._last_arrival = time.monotonic()
            if self.draining:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._in_flight -= 1
            if self.draining:  # only drain() waits for the count; start() set this under the lock
                self._lock.notify_all()

    def refuse(self, context: grpc.ServicerContext, method: str) -> None:
        """Answer a call that came in while draining: UNAVAILABLE `server_draining` (raises)."""
        if self.metrics is not None:
            self.metrics.refused_draining.inc()
        if self._on_refused is not None:
            self._on_refused(method)
        context.abort(grpc.StatusCode.UNAVAILABLE, f"{DRAINING_CODE}: the server is shutting down; retry on another")

    def start(self) -> None:
        with self._lock:
            self.draining = True
        if self.metrics is not None:
            self.metrics.draining.set(1)

    def wait(self, timeout: float) -> bool:
        """True once no call is in flight; False when `timeout` ran out first."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def wait_quiet(self, quiet: float, timeout: float) -> bool:
        """True once no call has reached the gate for `quiet` seconds and none is in flight;
        False when `timeout` ran out first."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                now = time.monotonic()
                calm = self._last_arrival + quiet - now
                if calm <= 0 and not self._in_flight:
                    return True
                if now >= deadline:
                    return False
                self._lock.wait(min(max(calm, 0.01), deadline - now))

    def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = continuation(details)
        method = details.method  # type: ignore[attr-defined]
        if handler is None or method.startswith(_ALWAYS):
            return handler
        # wrap each method's handler once, not on every call: this runs on the checkpoint's hot path
        cached = self._wrapped.get(method)
        if cached is None or cached[0] is not handler:
            cached = self._wrapped[method] = (handler, _wrap(handler, self, method))
        return cached[1]


def _wrap(handler: grpc.RpcMethodHandler, drain: Drain, method: str) -> grpc.RpcMethodHandler:
    metrics = drain.metrics if drain.per_call else None

    def done(context: grpc.ServicerContext, started: float, failed: bool) -> None:
        drain.leave()
        if metrics is not None:
            metrics.finished(method, status_name(context, failed), time.perf_counter() - started)

    def unary(behavior: Callable[..., Any]) -> Callable[..., Any]:
        def call(request: Any, context: grpc.ServicerContext) -> Any:
            if not drain.enter():
                drain.refuse(context, method)
            started, failed = time.perf_counter(), True
            try:
                answer = behavior(request, context)
                failed = False
                return answer
            finally:
                done(context, started, failed)

        return call

    def streaming(behavior: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        def call(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            if not drain.enter():
                drain.refuse(context, method)
            started, failed = time.perf_counter(), True
            try:
                yield from behavior(request, context)
                failed = False
            finally:
                done(context, started, failed)

        return call

    kinds = {"request_deserializer": handler.request_deserializer, "response_serializer": handler.response_serializer}
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(unary(handler.unary_unary), **kinds)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(streaming(handler.unary_stream), **kinds)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(unary(handler.stream_unary), **kinds)
    return grpc.stream_stream_rpc_method_handler(streaming(handler.stream_stream), **kinds)


def drain(server: grpc.Server, health: Any, gate: Drain, grace: float, *, end_streams: Callable[[], None] | None = None,
          name: str = "server") -> bool:
    """NOT_SERVING, refuse new calls, let the calls in flight finish within `grace` seconds, stop.
    True when every call finished; False when some were cancelled at the end of the grace."""
    health.enter_graceful_shutdown()
    gate.start()
    if end_streams is not None:
        end_streams()  # watch streams never end by themselves
    log.info("%s draining: %d call(s) in flight, grace %.1fs", name, gate.in_flight, grace)
    deadline = time.monotonic() + grace
    finished = gate.wait(grace)
    if not finished:
        log.warning("%s: %d call(s) still in flight after %.1fs: cancelled", name, gate.in_flight, grace)
    elif not gate.wait_quiet(QUIET_SECONDS, deadline - time.monotonic()):
        log.warning("%s: calls kept arriving until the end of the %.1fs grace: those arriving at the stop "
                    "may be cancelled", name, grace)
    # A handler that returned has not necessarily sent its answer yet: grpc's own grace lets those
    # answers go out (it ends as soon as they have), stop(0) here would cancel them on the wire.
    server.stop(max(deadline - time.monotonic(), 1.0) if finished else 0).wait()
    if not finished:
        gate.wait(5.0)  # cancelled handlers notice between steps; the log must outlive them if it can
    return finished
