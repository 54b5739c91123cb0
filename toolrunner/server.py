"""The gRPC face of the runner: thin; every refusal is mapped to a status in one place.

A refusal travels as a gRPC error: status per ``toolrunner.errors``, details
``<code>: <message>``, the stable code in a ``warden.checkpoint.v1.ErrorDetail`` in the standard
status details (built by the checkpoint's own ``to_status``), and again in trailing metadata under
``warden-code``.

Execute and ExecuteStream are protected by the grant. Cancel and GetReceipt carry no grant, so
they need a bearer token from the runner's token file (the checkpoint's format and parser); with
no token file they are refused.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import grpc
from grpc_health.v1 import health, health_pb2
from prometheus_client import Gauge

from toolrunner.errors import DockerUnavailable, RunnerError, Unauthenticated
from toolrunner.instance import instance_of
from toolrunner.policies import PolicySource
from toolrunner.reaper import Reaper
from toolrunner.receipts import Opened, open_receipts
from toolrunner.runner import RunnerConfig, ToolRunner
from toolrunner.watchdog import Watchdog
from warden import grants, tracing
from warden.auth import AuthPolicy
from warden.drain import DEFAULT_GRACE, Drain, drain
from warden.errors import ServiceError, to_status
from warden.metrics import MetricsServer, PolicyRevision, ServerMetrics, base_registry, bind_first, render
from warden.serving import add_health_and_reflection, bind_insecure, set_serving
from warden.store.url import StoreUrl
from warden.store.watch import StoreWatch
from warden.toolrunner.v1 import toolrunner_pb2 as pb
from warden.toolrunner.v1 import toolrunner_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ToolRunnerService"].full_name
CODE_KEY = "warden-code"


def connect_docker(timeout: float = 30.0) -> docker.APIClient:
    """A client for the engine in the environment (DOCKER_HOST or the default socket)."""
    try:
        client = docker.from_env(timeout=int(timeout))
        client.ping()
    except Exception as exc:
        raise DockerUnavailable(str(exc).splitlines()[0][:200]) from None
    return client.api


@dataclass(frozen=True)
class _Status(grpc.Status):  # type: ignore[misc]
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str | bytes], ...]


def refusal_status(exc: RunnerError) -> grpc.Status:
    """The status a refusal travels as: the checkpoint's ErrorDetail, plus `warden-code`."""
    error = ServiceError(exc.code, exc.message)
    error.status = exc.status  # the runner's own mapping of code to gRPC status
    status = to_status(error)
    return _Status(status.code, status.details, (*status.trailing_metadata, (CODE_KEY, exc.code)))


def _abort(context: grpc.ServicerContext, exc: RunnerError) -> None:
    context.abort_with_status(refusal_status(exc))


class ToolRunnerServicer(pb_grpc.ToolRunnerServiceServicer):
    def __init__(self, runner: ToolRunner, auth: AuthPolicy | None = None):
        self.runner = runner
        # Without tokens nobody passes: Cancel and GetReceipt fail closed.
        self.auth = auth or AuthPolicy()

    def _authenticate(self, context: grpc.ServicerContext) -> None:
        if self.auth.caller(context) is None:
            _abort(context, Unauthenticated("this call needs a bearer token from the toolrunner's token file"))

    def Execute(self, request: pb.ExecuteRequest, context: grpc.ServicerContext) -> pb.ExecuteResponse:
        try:
            return pb.ExecuteResponse(receipt=self.runner.execute(request))
        except RunnerError as exc:
            _abort(context, exc)
            raise  # unreachable: abort raises

    def ExecuteStream(
        self, request: pb.ExecuteRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.ExecuteStreamResponse]:
        events: queue.Queue[pb.ExecuteStreamResponse | RunnerError | None] = queue.Queue()

        def on_chunk(stream: str, text: str) -> None:
            events.put(pb.ExecuteStreamResponse(chunk=pb.OutputChunk(stream=stream, data=text)))

        def work() -> None:
            try:
                events.put(pb.ExecuteStreamResponse(receipt=self.runner.execute(request, on_chunk)))
            except RunnerError as exc:
                events.put(exc)
            except Exception as exc:  # never leave the stream hanging
                log.exception("ExecuteStream failed")
                events.put(RunnerError(f"internal error: {type(exc).__name__}"))
            finally:
                events.put(None)

        # The call runs to its receipt even if the client goes away: the grant is spent once
        # the container starts, and GetReceipt returns the result later.
        # The work thread continues the RPC's span, so the container's span is its child.
        threading.Thread(target=tracing.in_thread_context(work), name="execute-stream", daemon=True).start()
        while True:
            event = events.get()
            if event is None:
                return
            if isinstance(event, RunnerError):
                _abort(context, event)
            yield event  # type: ignore[misc]

    def Cancel(self, request: pb.CancelRequest, context: grpc.ServicerContext) -> pb.CancelResponse:
        self._authenticate(context)
        if not request.decision_id and not request.run_id:
            _abort(context, RunnerError("give a decision_id or a run_id", code="invalid_request"))
        return pb.CancelResponse(cancelled=self.runner.cancel(request.decision_id, request.run_id))

    def GetReceipt(self, request: pb.GetReceiptRequest, context: grpc.ServicerContext) -> pb.GetReceiptResponse:
        self._authenticate(context)
        try:
            return pb.GetReceiptResponse(receipt=self.runner.get_receipt(request.decision_id))
        except RunnerError as exc:
            _abort(context, exc)
            raise


@dataclass
class RunningServer:
    server: grpc.Server
    port: int
    runner: ToolRunner
    reaper: Reaper | None
    health: health.HealthServicer
    gate: Drain | None = None
    metrics_server: MetricsServer | None = None
    watchdog: Watchdog | None = None
    receipts: Opened | None = None
    store_watch: StoreWatch | None = None

    def stop(self, grace: float | None = 1.0) -> None:
        """Drain: NOT_SERVING, new calls refused, running tools get `grace` seconds to finish and
        their receipts are stored; then the receipt store closes."""
        if self.store_watch is not None:
            self.store_watch.stop()
        if self.gate is not None:
            drain(self.server, self.health, self.gate, grace or 0.0, name="toolrunner")
        else:
            self.health.enter_graceful_shutdown()
            self.server.stop(grace).wait()
        if self.reaper:
            self.reaper.stop()
        if self.watchdog is not None:  # what is still running after the drain goes with the runner
            self.watchdog.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.receipts is not None:
            self.receipts.close()  # the receipts and, on a shared store, the instance's name
        else:
            self.runner.store.close()


def create_server(address: str, *, metrics_address: str | None = None, **options: Any) -> tuple[RunningServer, int]:
    """Build and start the server; returns it and the bound port (bind ``127.0.0.1:0`` in tests).
    The metrics address is bound first: a taken port stops the start with
    `warden.metrics.MetricsAddressUnavailable` before anything else is opened or started. The
    options are `_create_server`'s."""
    metrics_server = bind_first(metrics_address)
    try:
        return _create_server(address, metrics_server=metrics_server, **options)
    except BaseException:
        if metrics_server is not None:
            metrics_server.stop()
        raise


def _create_server(
    address: str,
    *,
    tools: Mapping[str, Any] | None = None,
    policy_revision: str = "",
    policy_dir: str | Path | None = None,
    keys: dict[str, grants.SigningKey] | grants.SigningKey,
    data_dir: str | Path,
    store: StoreUrl | None = None,
    instance: str | None = None,
    tokens: dict[bytes, str] | None = None,
    secrets: dict[str, str] | None = None,
    config: RunnerConfig | None = None,
    api: docker.APIClient | None = None,
    reap_interval_seconds: float = 30.0,
    max_workers: int = 32,
    metrics_server: MetricsServer | None = None,
) -> tuple[RunningServer, int]:
    """Build and start the server; returns it and the bound port.

    Tools come from `policy_dir` (then a grant of a newer policy revision reloads the folder once)
    or, for embedding, from `tools` with the `policy_revision` they belong to (grants of any other
    revision are refused). `tokens` (sha256 of
    token -> caller, `warden.auth.load_tokens`) admit Cancel and GetReceipt callers.

    Receipts live in `store` (None: SQLite in `data_dir`), claimed under `instance` (None: the
    name kept in the data folder, toolrunner/instance.py). A PostgreSQL store that cannot be
    reached, lacks its schema or has this instance running elsewhere stops the start
    (warden.store.errors.StoreError).

    Fails with DockerUnavailable (saying how to get an engine) when no engine answers: a runner
    that cannot run anything must not pretend to be healthy.
    """
    if (tools is None) == (policy_dir is None):
        raise ValueError("give exactly one of tools and policy_dir")
    source = PolicySource(policy_dir) if policy_dir is not None else None
    revision = policy_revision
    if source is not None:
        loaded = source.load()
        tools, revision = loaded.tools, loaded.revision
    assert tools is not None
    api = api or connect_docker()
    opened = open_receipts(store, data_dir=data_dir, instance=instance_of(data_dir, instance))
    try:
        runner = ToolRunner(tools=tools, keys=keys, store=opened.receipts, api=api, secrets=secrets,
                            config=config, policy_revision=revision, policy_source=source)
    except BaseException:
        opened.close()
        raise
    log.info("receipts in %s as instance %s", opened.shown, opened.receipts.instance)
    reaper = Reaper(api, reap_interval_seconds)
    removed = reaper.start()
    if removed:
        log.warning("removed %d leftover container(s) at start", len(removed))
    # Before the first call: no container of this runner may outlive it (toolrunner/watchdog.py).
    watchdog = Watchdog(runner.config.runner_id)
    for ref, image_id in runner.pinned.items():
        if image_id:
            log.info("image %s pinned to %s", ref, image_id)
        else:
            log.warning("image %s is not present: its tools are refused until it is built", ref)

    registry = base_registry("toolrunner")
    gate = Drain(ServerMetrics(registry, "toolrunner"))
    running = Gauge("warden_toolrunner_tool_calls_running", "Tool calls in their container now", registry=registry)
    running.set_function(lambda: len(runner.running()))  # read at scrape
    registry.register(PolicyRevision("toolrunner", lambda: runner.policy_revision))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="toolrunner"),
                         interceptors=[gate, *tracing.server_interceptors()])  # tracing: none when off
    if not tokens:
        log.warning("no token file: Cancel and GetReceipt are refused for every caller")
    servicer = ToolRunnerServicer(runner, AuthPolicy(tokens=dict(tokens or {})))
    pb_grpc.add_ToolRunnerServiceServicer_to_server(servicer, server)
    health_servicer = add_health_and_reflection(server, SERVICE_NAME)
    port = bind_insecure(server, address)

    def health_state() -> dict[str, Any]:
        store_up = watch is None or watch.serving
        return {"status": "NOT_SERVING" if gate.draining or not store_up else "SERVING", "draining": gate.draining,
                "store": "answering" if store_up else "unavailable", "policy_revision": runner.policy_revision}

    watch: StoreWatch | None = None
    if metrics_server is not None:
        metrics_server.render, metrics_server.health = (lambda: render(registry)), health_state
    server.start()
    if metrics_server is not None:
        metrics_server.start()
        log.info("toolrunner metrics on port %d", metrics_server.port)
    set_serving(health_servicer, SERVICE_NAME)
    if store is not None and store.is_postgresql:
        watch = StoreWatch(opened.receipts.ping, lambda up: _set_health(health_servicer, up),
                           f"receipt store {opened.shown}").start()
    return RunningServer(server, port, runner, reaper, health_servicer, gate, metrics_server, watchdog,
                         opened, watch), port


def _set_health(servicer: health.HealthServicer, serving: bool) -> None:
    # a draining server's health no longer changes: grpc's servicer ignores this after
    # enter_graceful_shutdown
    if serving:
        set_serving(servicer, SERVICE_NAME)
    else:
        for name in ("", SERVICE_NAME):
            servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)


def serve(address: str, grace: float = DEFAULT_GRACE, **kwargs) -> int:  # type: ignore[no-untyped-def]
    running, port = create_server(address, **kwargs)
    log.info("toolrunner listening on port %d", port)
    print(f"toolrunner listening on {address.rsplit(':', 1)[0]}:{port}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    running.stop(grace=grace)
    return 0
