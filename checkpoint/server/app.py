"""Assembling a checkpoint: policy store and watcher, decision log, key, gRPC server, metrics.

`create_server` builds and binds everything and returns `(server, port)` without blocking, so
tests bind port 0 and talk to a real server; `serve` is the blocking entry point for the CLI.
"""

from __future__ import annotations

import logging
import os
import signal
import stat
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from checkpoint.audit.heads import DEFAULT_INTERVAL_SECONDS as DEFAULT_HEAD_INTERVAL
from checkpoint.audit.heads import HeadSigner
from checkpoint.audit.port import DecisionLogStore
from checkpoint.audit.rotate import AutoRotate
from checkpoint.policy import AgentCatalog, input_schemas
from checkpoint.policy.learnings import LearningStore
from checkpoint.server.agent_stats import AgentStatsCollector
from checkpoint.server.bundle_source import BundleSettings, BundleSource
from checkpoint.server.grpc_api import SERVICE_NAME, method_handlers
from checkpoint.server.http_door import HttpDoor
from checkpoint.server.metrics import Metrics, MetricsServer
from checkpoint.server.notifier import Notifier, NotifySettings
from checkpoint.server.ratelimit import PeerLimiter
from checkpoint.server.reload import DEFAULT_SETTLE, PolicyStore, PolicyWatcher, ReloadStatus
from checkpoint.server.service import CheckpointService
from checkpoint.server.shared_state import SharedStateWatch
from checkpoint.server.stores import CheckpointStores, decision_log, open_stores, store_url
from warden import tracing
from warden.auth import AuthPolicy, OnRefused
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.drain import DEFAULT_GRACE, Drain, drain
from warden.grants import SigningKey
from warden.metrics import PolicyRevision
from warden.private import private_folder, read_trusted
from warden.store.url import StoreUrl
from warden.token_keys import FOLDER as TOKEN_KEYS_FOLDER
from warden.token_keys import KeySet
from warden.tokens import APPROVAL_TOKEN_TTL_SECONDS, RUN_TOKEN_TTL_SECONDS

log = logging.getLogger("warden.checkpoint")

# A health entry of its own for the newest policy edit: SERVING while it loaded, NOT_SERVING
# while it is broken (the last good set keeps serving under SERVICE_NAME meanwhile).
RELOAD_HEALTH_NAME = "warden.checkpoint.v1.PolicyReload"
DEFAULT_MAX_REQUEST_BYTES = 1 << 20  # a Check is a few KB; a 1000-item batch still fits
MAX_RESPONSE_BYTES = 16 << 20


@dataclass
class TlsConfig:
    """Server certificate and key, and the CA that client certificates must chain to (mTLS)."""

    cert: Path
    key: Path
    client_ca: Path


class CheckpointServer:
    """A bound, not yet started checkpoint. `start()`, then `stop()`; usable as a context manager."""

    def __init__(
        self,
        grpc_server: grpc.Server,
        service: CheckpointService,
        store: PolicyStore,
        watcher: PolicyWatcher | None,
        decisions: DecisionLogStore,
        health_servicer: health.HealthServicer,
        metrics_server: MetricsServer | None,
        uds_path: Path | None,
        head_signer: HeadSigner | None = None,
        gate: Drain | None = None,
        rotator: AutoRotate | None = None,
        stores: CheckpointStores | None = None,
    ):
        self.grpc_server = grpc_server
        self.stores = stores
        self.gate = gate or Drain()
        self.rotator = rotator
        self.head_signer = head_signer
        self.service = service
        self.store = store
        self.watcher = watcher
        self.log = decisions
        self.health = health_servicer
        self.metrics_server = metrics_server
        self.uds_path = uds_path
        self.metrics_port = metrics_server.port if metrics_server else None
        self._stopped = threading.Event()
        self.http_door: HttpDoor | None = None  # the HTTP/JSON door, when --http-address names one
        self.http_port: int | None = None
        self.bundle: BundleSource | None = None  # the signed policy bundle followed, when --policy-bundle names one

    def start(self) -> CheckpointServer:
        self.grpc_server.start()
        if self.http_door is not None:
            self.http_door.start()
        if self.watcher is not None:
            self.watcher.start()
        if self.bundle is not None:
            self.bundle.start()
        self.service.learnings.start()  # learnings nothing triggered for 90 days go stale
        if self.metrics_server is not None:
            self.metrics_server.start()
        if self.head_signer is not None:
            self.head_signer.start()
        if self.rotator is not None:
            self.rotator.start()
        if self.service.notifier is not None:
            self.service.notifier.start()
        return self

    def _say_the_log_closed(self, signed: tuple[int, str] | None) -> None:
        """Close the log and say where it ended: an operator stopping a checkpoint can note the head,
        and see that it was signed (or why not), without opening the log."""
        try:
            seq, digest = self.log.head() or (0, "")
        except Exception:  # noqa: BLE001 - a log that cannot say its head still closes
            seq, digest = -1, ""
        self.log.close()
        where = f"at seq {seq}, hash {digest[:16]}" if seq >= 0 else "(its head could not be read)"
        if self.head_signer is None:
            said = "heads are not signed here"
        elif signed is not None and signed[0] == seq:
            said = "that head is signed"
        else:
            said = f"the last head signed is seq {signed[0]}" if signed else "no head is signed (an empty log)"
        log.info("decision log closed %s; %s", where, said)

    def stop(self, grace: float | None = 2.0) -> None:
        """Drain (docs/operations.md): NOT_SERVING, new calls refused, the calls in flight finish
        within `grace` seconds and are recorded; then the log closes, its last head signed."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self.bundle is not None:
            self.bundle.stop()
        if self.watcher is not None:
            self.watcher.stop()
        drain(self.grpc_server, self.health, self.gate, grace or 0.0, end_streams=self.service.stream.stop_watchers,
              name="checkpoint")
        if self.http_door is not None:  # its calls in flight were drained with gRPC's, by the one gate
            self.http_door.stop()
        self.service.learnings.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()
        if self.rotator is not None:
            self.rotator.close()
        if self.service.notifier is not None:  # before the log closes: it records each attempt there
            self.service.notifier.close()
        signed = self.head_signer.close() if self.head_signer is not None else None  # before the log closes
        self._say_the_log_closed(signed)
        if self.stores is not None:
            self.stores.close()
        if self.uds_path is not None:
            try:
                self.uds_path.unlink()
            except FileNotFoundError:
                pass

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return self.grpc_server.wait_for_termination(timeout)

    def health_details(self) -> dict[str, Any]:
        status = self.store.status
        store_current = self.stores is None or self.stores.current()
        serving = status.loaded and self.log.writable and not self.gate.draining and store_current
        out: dict[str, Any] = {"status": "SERVING" if serving else "NOT_SERVING", **status.as_dict()}
        if self.stores is not None and self.stores.database is not None:  # a shared store: is it answering?
            out["store"] = {"url": self.stores.url.shown, "current": store_current}
        if self.bundle is not None:  # a bundle refused leaves the set in force serving, and says so here
            out["policy_bundle"] = self.bundle.status.as_dict()
        out["draining"] = self.gate.draining
        out["decision_log"] = self.log.stats() | {"closed": self.log.closed, "writable": self.log.writable}
        return out

    def __enter__(self) -> CheckpointServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def create_server(
    address: str | None = "127.0.0.1:0",
    *,
    uds_path: str | Path | None = None,
    uds_mode: int = 0o600,
    policy_dir: str | Path,
    data_dir: str | Path,
    key: SigningKey,
    auth: AuthPolicy | None = None,
    tls: TlsConfig | None = None,
    metrics_address: str | None = None,
    http_address: str | None = None,
    watch_interval: float | None = 5.0,
    settle: float = DEFAULT_SETTLE,
    reload_polling: bool = False,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_workers: int = 64,
    max_watchers: int = 16,
    max_check_streams: int = 8,
    log_synchronous: str = "NORMAL",
    refusal_limiter: PeerLimiter | None = None,
    head_interval: float | None = DEFAULT_HEAD_INTERVAL,
    rotate_bytes: int | None = None,
    rotate_age: float | None = None,
    rotate_interval: float = 30.0,
    shared: bool = False,
    run_token_ttl: float = RUN_TOKEN_TTL_SECONDS,
    approval_token_ttl: float = APPROVAL_TOKEN_TTL_SECONDS,
    store: StoreUrl | str | None = None,
    notify: NotifySettings | None = None,
    bundle: BundleSettings | None = None,
) -> tuple[CheckpointServer, int]:
    """Build a checkpoint and bind its listeners. Returns (server, TCP port; 0 when no TCP).

    The first policy load happens here, so a good folder serves from the first request; a broken
    one leaves health NOT_SERVING and every Check UNAVAILABLE until an edit loads.
    `watch_interval`: None or 0 disables hot reload; otherwise the seconds between content checks
    when no file event comes. `settle`: an edit is loaded once its files have not changed for
    that long; `reload_polling` polls the folder instead of waiting for file events.
    `refusal_limiter`: how many unauthenticated refusals each peer may have recorded (the rest
    are counted only); the default is 10 a second, bursts of 20.
    `head_interval`: seconds between signed heads of the decision log (docs/audit.md, "Signed
    heads"); the head is signed on shutdown too. None or 0: only on shutdown.
    `rotate_bytes`, `rotate_age`: seal the decision log into a segment when its live file's records
    use that many bytes, or its oldest record is that many seconds old, looked at every
    `rotate_interval` seconds (docs/audit.md, "Retention"); None: only `warden audit rotate`.
    `shared`: one worker of several (`serve --workers N`, workers.py) on the same port and data
    folder: the port is bound with SO_REUSEPORT, the log takes turns with the other writers,
    other workers' catalog and learning acts are picked up before each decision, and heads are
    left to the supervisor, which signs them for all.
    `run_token_ttl`, `approval_token_ttl`: seconds a run token and an approval token live
    (docs/checkpoint-service.md, "Token lifetimes and keys"); they are signed by the Ed25519 keys
    in DATA/token-keys/, made on first use.
    `http_address`: HOST:PORT of the HTTP/JSON door (http_door.py), the same methods, authentication
    (the tokens, or the mTLS of `tls`), gate, limits and records as gRPC; None: no HTTP door.
    `notify`: webhooks told of every REQUIRE_APPROVAL, HALT and handoff once it is recorded
    (notifier.py, docs/approvals.md); None: nobody is told.
    `bundle`: a signed policy bundle to follow (bundle_source.py, docs/bundles.md): fetched once
    before the first load and every `poll` seconds after, installed behind `policy_dir` (a link).
    `store`: where the single-use store keeps approvals spent, act ids taken and runs ended: unset,
    SQLite in the data folder; a PostgreSQL URL, one database that replicas share (docs/fleet.md,
    "Checkpoint replicas"), whose schema must be current (StoreError otherwise, before anything binds).
    The decision log goes where `store` says too: DATA/decisions.db, or the table every replica
    appends to before it answers (docs/fleet.md, "One decision log").
    """
    data = Path(data_dir)
    private_folder(data)
    auth = auth or AuthPolicy()
    if (address or http_address) and tls is None and not auth.configured:
        raise ValueError(
            "TCP needs caller authentication: give a tokens file or mTLS, or listen on the Unix socket only"
        )
    input_schemas.preload()
    metrics = Metrics()
    health_servicer = health.HealthServicer(experimental_non_blocking=True)
    for name in ("", SERVICE_NAME, RELOAD_HEALTH_NAME):
        health_servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)

    serving = health_pb2.HealthCheckResponse.SERVING
    not_serving = health_pb2.HealthCheckResponse.NOT_SERVING
    # SERVING needs a policy set and a decision log that takes records: without either, every
    # decision is a refusal, and health says so until it is not
    ready = {"policies": False, "log": True, "store": True}
    ready_lock = threading.Lock()  # the reload thread and the log's writers both report

    def publish(part: str, ok: bool) -> None:
        with ready_lock:
            ready[part] = ok
            for name in ("", SERVICE_NAME):
                health_servicer.set(name, serving if all(ready.values()) else not_serving)

    def on_reload(status: ReloadStatus) -> None:
        metrics.reloads.labels("ok" if status.last_ok else "error").inc()
        metrics.policy_loaded.set(1 if status.loaded else 0)
        metrics.policy_last_reload_ok.set(1 if status.last_ok else 0)
        metrics.policy_errors.set(len(status.errors))
        publish("policies", status.loaded)
        health_servicer.set(RELOAD_HEALTH_NAME, serving if status.last_ok else not_serving)

    # first: a store that cannot open (unreachable, schema not current) stops the start with nothing opened
    stores = open_stores(store_url(store, data), run_token_ttl=run_token_ttl,
                         on_current=lambda current: publish("store", current))
    catalog = AgentCatalog(store=stores.catalog) if stores.catalog is not None else AgentCatalog(data / "catalog.db")
    policy_store = PolicyStore(policy_dir, catalog, on_change=on_reload)
    try:
        if stores.url.is_postgresql and (rotate_bytes or rotate_age):
            raise ValueError("--rotate-size and --rotate-age seal SQLite files: a PostgreSQL decision log is rotated "
                             "and pruned with `warden audit rotate|prune --store` (docs/fleet.md)")
        decisions = decision_log(stores.url, data, synchronous=log_synchronous, shared=shared)
    except BaseException:
        stores.close()
        raise
    decisions.on_writable(lambda writable: publish("log", writable))
    try:
        head_signer = None if shared else HeadSigner(decisions.head, decisions.path, interval=head_interval)
    except BaseException:
        decisions.close()
        stores.close()
        raise
    try:
        token_keys = KeySet(data / TOKEN_KEYS_FOLDER)
    except BaseException:
        decisions.close()
        stores.close()
        raise
    service = CheckpointService(policy_store, decisions, key, metrics, stores.single_use,
                                learnings=_learnings(stores, data), token_keys=token_keys,
                                run_token_ttl=run_token_ttl, approval_token_ttl=approval_token_ttl,
                                limits=stores.limits)
    if notify is not None:  # webhooks told of REQUIRE_APPROVAL, HALT and handoff, after the record
        service.notifier = Notifier(notify, service.recorder.append)
    if shared and stores.catalog_feed is None:
        service.sync_shared = SharedStateWatch([data / "catalog.db", data / "learnings.db"], policy_store.refresh).sync
    bundle_source = None
    if bundle is not None:  # the first fetch before the first load: a good bundle serves from the start
        bundle_source = BundleSource(bundle.source, bundle.public, Path(policy_dir), poll=bundle.poll,
                                     on_applied=policy_store.reload,
                                     on_refused=lambda code: metrics.bundle_refusals.labels(code).inc())
        bundle_serial = metrics.bundle_serial
        bundle_source.on_serial = lambda serial: bundle_serial.set(serial or 0)
        try:
            bundle_source.poll_once()
        except BaseException:
            decisions.close()
            stores.close()
            raise
    policy_store.reload()  # after the service: what the first load changes in the catalog is recorded
    if stores.catalog_feed is not None:  # a shared store: other replicas' acts, in force here within a second
        try:
            stores.catalog_feed.start(lambda: policy_store.refresh(strict=True))
        except BaseException:
            decisions.close()
            stores.close()
            raise
        service.in_force.catalog_current = stores.catalog_feed.require_current
    metrics.registry.register(AgentStatsCollector(service.agent_stats.stats))  # computed on scrape
    metrics.registry.register(PolicyRevision("checkpoint", lambda: _serving_revision(policy_store)))

    gate = Drain(metrics.server, per_call=False)
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="checkpoint-rpc"),
        # tracing adds none when it is off, so Check() runs no tracing code at all then; the drain
        # gate is asked inside each handler (servicers/handling.py), health and reflection never refused
        interceptors=tracing.server_interceptors(),
        options=[
            ("grpc.max_receive_message_length", max_request_bytes),
            ("grpc.max_send_message_length", MAX_RESPONSE_BYTES),
            # Two checkpoints on one port would split traffic silently; fail the second bind instead.
            # Workers of one checkpoint share it on purpose (the supervisor checked it was free).
            ("grpc.so_reuseport", 1 if shared else 0),
        ],
    )
    on_unauthenticated = _record_unauthenticated(service, refusal_limiter or PeerLimiter())
    # one set of handlers for both doors: one gate, one cap on decision streams, one refusal limiter
    handlers = method_handlers(service, auth, on_unauthenticated, max_watchers=max_watchers,
                               max_check_streams=max_check_streams, gate=gate)
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
        server,
    )

    uds = Path(uds_path).resolve() if uds_path else None
    http_door: HttpDoor | None = None
    try:
        port = _bind(server, address, tls, uds, uds_mode)
        http_door = (HttpDoor(http_address, handlers, max_request_bytes=max_request_bytes, max_calls=max_workers,
                              tls=tls, shared=shared) if http_address else None)
        metrics_server = MetricsServer(metrics_address, metrics, lambda: {}) if metrics_address else None
    except BaseException:
        decisions.close()  # a port in use must not leave the log's writer thread behind
        stores.close()
        if http_door is not None:
            http_door.stop()
        raise
    watcher = (
        PolicyWatcher(policy_store, settle=settle, recheck=watch_interval, force_polling=reload_polling or None)
        if watch_interval
        else None
    )
    rotator = (AutoRotate(decisions.path, rotate_bytes, rotate_age, rotate_interval)
               if rotate_bytes or rotate_age else None)
    checkpoint = CheckpointServer(
        server, service, policy_store, watcher, decisions, health_servicer, metrics_server, uds, head_signer, gate, rotator,
        stores,
    )
    if http_door is not None:
        checkpoint.http_door, checkpoint.http_port = http_door, http_door.port
    checkpoint.bundle = bundle_source
    if metrics_server is not None:
        metrics_server.health = checkpoint.health_details
    return checkpoint, port


def _serving_revision(store: PolicyStore) -> str | None:
    current = store.current
    return current.revision if current is not None else None


def _learnings(stores: CheckpointStores, data: Path) -> LearningStore:
    """The learnings where the catalog is: the shared database, or learnings.db in the data folder."""
    return LearningStore(store=stores.learnings) if stores.learnings is not None else LearningStore(data / "learnings.db")


def _record_unauthenticated(service: CheckpointService, limiter: PeerLimiter) -> OnRefused:
    """Record an unauthenticated refusal within the peer's rate; beyond it, count it only."""

    def on_refused(method: str, request: Any, context: grpc.ServicerContext) -> None:
        records = len(request.items) if isinstance(request, pb.CheckBatchRequest) else 1
        if limiter.admit(context.peer(), cost=max(records, 1)):
            service.record_unauthenticated(method, request)
        else:
            service.metrics.refusals.labels("unauthenticated").inc()
            service.metrics.refusals_unrecorded.labels("unauthenticated").inc()

    return on_refused


def _bind(
    server: grpc.Server, address: str | None, tls: TlsConfig | None, uds: Path | None, uds_mode: int
) -> int:
    port = 0
    if address:
        if tls is not None:
            creds = grpc.ssl_server_credentials(
                [(read_trusted(tls.key, "TLS private key"), read_trusted(tls.cert, "TLS certificate"))],
                root_certificates=read_trusted(tls.client_ca, "client CA certificate"),
                require_client_auth=True,
            )
            port = server.add_secure_port(address, creds)
        else:
            port = server.add_insecure_port(address)
    if uds is not None:
        _bind_unix_socket(server, uds, uds_mode)
    return port


def _bind_unix_socket(server: grpc.Server, path: Path, mode: int) -> None:
    """Bind the socket so it is never, even for an instant, open wider than `mode`.

    The umask is process-wide, so this belongs at startup, before other threads create files.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() or path.is_symlink():
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise FileExistsError(f"{path} exists and is not a socket")
        path.unlink()  # left behind by a checkpoint that was killed
    old = os.umask(0o777 & ~mode)
    try:
        server.add_insecure_port(f"unix:{path}")
    finally:
        os.umask(old)
    os.chmod(path, mode)


def serve(grace: float = DEFAULT_GRACE, *, hold: list[Any] | None = None, **kwargs: Any) -> int:
    """Run until SIGTERM or SIGINT, then drain in-flight calls (up to `grace` seconds) and close the log.

    `hold`: the server is appended there, for a caller that ends its process with os._exit
    (a worker) and so never needs gRPC torn down, with the risks of a teardown, before it."""
    server, port = create_server(**kwargs)
    if hold is not None:
        hold.append(server)
    server.start()
    where = [f"tcp port {port}"] if port else []
    if server.uds_path:
        where.append(f"unix socket {server.uds_path}")
    if server.http_port:
        where.append(f"HTTP/JSON on port {server.http_port}")
    if server.metrics_port:
        where.append(f"metrics on port {server.metrics_port}")
    log.info(
        "checkpoint serving (%s), policy revision %s",
        ", ".join(where),
        server.store.status.revision or "none",
    )
    done = threading.Event()

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        done.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not done.wait(1.0):
        pass
    server.stop(grace=grace)
    return 0
