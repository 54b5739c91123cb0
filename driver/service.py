"""DriverService over gRPC: a thin layer over the Driver; errors are mapped in one place.

Every RPC is a person's action and needs an operator credential (`authorization: Bearer <token>`,
tokens from an operators file, `person token` per line, 0600). The person the token names is
who approved, paused, resumed or cancelled: it is never read from the request. What that person may do
in the run's tenant is the checkpoint's answer (driver/access.py: any role to read a run,
`operator` to act on one, `approver` to approve). Health and reflection are open. Stable codes
travel in a warden.checkpoint.v1.ErrorDetail in the status details.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import logging
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from grpc_health.v1 import health, health_pb2

from driver.access import PersonRoles
from driver.approval_deadlines import DEFAULT_INTERVAL, DeadlineWatch
from driver.durable.metrics import FleetCollector
from driver.errors import DependencyUnavailable, DriverError, GoalError, RunStateError
from driver.goal import Goal, parse_goal
from driver.loop import Driver
from driver.providers.scripted import ScriptError, parse_script
from driver.runs.model import Run
from warden import tracing
from warden.auth import TokenFileError, load_tokens
from warden.budget import FIELDS as BUDGET_FIELDS
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.drain import Drain, drain
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.errors import ServiceError, abort
from warden.metrics import MetricsServer, ServerMetrics, base_registry, bind_first, render
from warden.serving import add_health_and_reflection, bind_insecure, set_serving
from warden.store.errors import StoreError
from warden.store.watch import StoreWatch
from warden.structs import struct_to_dict

if TYPE_CHECKING:
    from driver.durable.holders import Holder

log = logging.getLogger("warden.driver.service")
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DriverService"].full_name
_STATUS = {s: pb.RunStatus.Value("RUN_STATUS_" + s.upper()) for s in
           ("running", "paused", "awaiting_approval", "succeeded", "failed", "cancelled", "awaiting_child")}
_STATUS_NAME = {v: k for k, v in _STATUS.items()}



# The operators file has the checkpoint's token-file format (`person token` per line, 0600,
# kept hashed); one parser serves both. The person named on the line is who acted.
OperatorsFileError = TokenFileError


def load_operators(path: str | Path) -> dict[bytes, str]:
    """sha256(token) -> person. A file others can read, one with no tokens, or a line that does
    not name its person is refused."""
    return load_tokens(path, require_names=True)


def _ts(t: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(t * 1e9))
    return ts


def _struct(d: dict[str, Any]) -> struct_pb2.Struct:
    s = struct_pb2.Struct()
    s.update(json.loads(json.dumps(d, default=str)))  # plain JSON values only: Struct refuses the rest
    return s


def budget_to_dict(b: cp.Budget) -> dict[str, Any]:
    return {f: getattr(b, f) for f in BUDGET_FIELDS if getattr(b, f)}


def goal_from_proto(g: pb.Goal) -> Goal:
    criteria = []
    for c in g.criteria:
        item: dict[str, Any] = {"id": c.id, "description": c.description}
        if c.HasField("check") and c.check.kind:
            check: dict[str, Any] = {k: v for k, v in (("kind", c.check.kind), ("tool", c.check.tool),
                                                       ("output_contains", c.check.output_contains)) if v}
            if c.check.HasField("arguments"):
                check["arguments"] = struct_to_dict(c.check.arguments, checked=False)
            if c.check.arguments_from:
                check["arguments_from"] = {name: {"receipt": ref.receipt, "field": ref.field}
                                           for name, ref in c.check.arguments_from.items()}
            item["check"] = check
        criteria.append(item)
    return parse_goal({"objective": g.objective, "criteria": criteria, "constraints": list(g.constraints),
                       "budget": budget_to_dict(g.budget)})


def goal_to_proto(goal: Goal) -> pb.Goal:
    out = pb.Goal(objective=goal.objective, constraints=goal.constraints,
                  budget=cp.Budget(**goal.budget.model_dump(exclude_none=True)))
    for c in goal.criteria:
        crit = out.criteria.add(id=c.id, description=c.description)
        if c.check:
            crit.check.CopyFrom(pb.CriterionCheck(kind=c.check.kind, tool=c.check.tool or "",
                                                  output_contains=c.check.output_contains or ""))
            if c.check.arguments is not None:
                crit.check.arguments.CopyFrom(_struct(c.check.arguments))
            for name, ref in (c.check.arguments_from or {}).items():
                crit.check.arguments_from[name].CopyFrom(pb.ReceiptValue(receipt=ref.receipt, field=ref.field))
    return out


def holders_of(driver: Driver, run_ids: list[str]) -> dict[str, Holder]:
    """Who holds these runs (durable runs on PostgreSQL); nobody on SQLite."""
    return driver.durable.holders(run_ids) if driver.durable is not None else {}


def run_to_proto(driver: Driver, run: Run, holder: Holder | None = None, *, look_up_holder: bool = True) -> pb.Run:
    """The Run message; its lease holder is looked up unless given (`look_up_holder=False`:
    the caller looked up a batch and this run had none)."""
    if holder is None and look_up_holder:
        holder = holders_of(driver, [run.run_id]).get(run.run_id)
    counters = driver._counters(run)
    out = pb.Run(
        run_id=run.run_id, agent=run.agent, agent_version=run.agent_version, tenant=run.tenant,
        owner=run.owner, mode=pb.RUN_MODE_BACKGROUND if run.mode == "background" else pb.RUN_MODE_INTERACTIVE,
        status=_STATUS.get(run.status, pb.RUN_STATUS_UNSPECIFIED), code=run.code, reason=run.reason,
        goal_version=run.goal_version, counters=counters,
        budget=cp.Budget(**(run.budget or {})),
        missing=run.missing or [], provider=run.provider, model=run.model,
        policy_revision=run.policy_revision, created_at=_ts(run.created_at), updated_at=_ts(run.updated_at),
        stretch=run.stretch, total_tokens=run.total_tokens, parent_run_id=run.parent_run_id,
        root_run_id=run.root_run_id or run.run_id, depth=run.depth,
    )
    if holder is not None:
        out.lease_holder, out.lease_holder_dead = holder.executor_id, holder.dead
        if holder.expires_at:
            out.lease_expires_at.CopyFrom(_ts(holder.expires_at))
    for a in driver.store.approvals(run.run_id, status="pending"):
        out.pending_approvals.add(approval_id=a.approval_id, run_id=a.run_id, tool=a.tool,
                                  arguments=_struct(a.arguments), code=a.code, rule=a.rule,
                                  reason=a.reason, status=a.status, decided_by=a.decided_by,
                                  decision_id=a.decision_id)
    return out


_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


def _abort(context: grpc.ServicerContext, status: grpc.StatusCode, code: str, message: str) -> None:
    """End the call with the checkpoint's status mapping: ErrorDetail in the status details."""
    error = ServiceError(code, message)
    error.status = status
    abort(context, error)


def _driver_errors(rpc: Callable[[DriverServicer, _Req, grpc.ServicerContext], _Resp],
                   ) -> Callable[[DriverServicer, _Req, grpc.ServicerContext], _Resp]:
    """A unary RPC whose DriverError or StoreError ends the call with its status (see
    DriverServicer._fail and _store_failed)."""

    @functools.wraps(rpc)
    def wrapper(self: DriverServicer, request: _Req, context: grpc.ServicerContext) -> _Resp:
        try:
            return rpc(self, request, context)
        except DriverError as exc:
            self._fail(context, exc)
            raise
        except StoreError as exc:
            _store_failed(context, exc)
            raise

    return wrapper


def _store_failed(context: grpc.ServicerContext, exc: StoreError) -> None:
    """The runs' store cannot answer (a shared database down, slow or out of connections):
    UNAVAILABLE with its code, nothing done that the caller can rely on; the next call finds the
    database again by itself."""
    log.warning("store: %s", exc)
    _abort(context, grpc.StatusCode.UNAVAILABLE, exc.code, str(exc))


class DriverServicer(pb_grpc.DriverServiceServicer):
    def __init__(self, driver: Driver, operators: dict[bytes, str]) -> None:
        self.driver = driver
        self.operators = operators
        self.stopping = threading.Event()

    # One place where a caller becomes a person, and where errors become statuses.
    def _person(self, context: grpc.ServicerContext) -> str:
        md = dict(context.invocation_metadata())
        auth = str(md.get("authorization", ""))
        if auth.lower().startswith("bearer "):
            digest = hashlib.sha256(auth[7:].strip().encode()).digest()
            for known, person in self.operators.items():
                if hmac.compare_digest(known, digest):
                    return person
        _abort(context, grpc.StatusCode.UNAUTHENTICATED, "unauthenticated",
               "this action needs an operator credential (authorization: Bearer <token>)")
        raise AssertionError("unreachable")

    def _roles(self, person: str) -> PersonRoles:
        """The person's roles per tenant, asked of the checkpoint for this call (fail closed: an
        unreachable checkpoint is UNAVAILABLE, and nothing is read or done)."""
        return PersonRoles(person, self.driver.checkpoint.roles(person))

    def _on_run(self, context: grpc.ServicerContext, rpc: str, run_id: str) -> tuple[str, Run]:
        """The person calling and the run `rpc` acts on, once their roles in its tenant allow it."""
        person = self._person(context)
        roles = self._roles(person)
        run = self.driver.store.run(run_id)
        roles.require(rpc, run.tenant, what="run", key=run_id)
        return person, run

    def _on_approval(self, context: grpc.ServicerContext, rpc: str, approval_id: str) -> str:
        """The person calling, once their roles in the tenant of the approval's run allow `rpc`."""
        person = self._person(context)
        roles = self._roles(person)
        approval = self.driver.store.approval(approval_id)
        roles.require(rpc, self.driver.store.run(approval.run_id).tenant, what="approval", key=approval_id)
        return person

    def _fail(self, context: grpc.ServicerContext, exc: DriverError) -> None:
        if isinstance(exc, GoalError):
            status = grpc.StatusCode.INVALID_ARGUMENT
        elif isinstance(exc, DependencyUnavailable):
            status = grpc.StatusCode.UNAVAILABLE
        elif exc.code in ("role_required", "caller_not_permitted"):
            status = grpc.StatusCode.PERMISSION_DENIED
        elif exc.code in ("run_not_found", "approval_not_found"):
            status = grpc.StatusCode.NOT_FOUND
        elif isinstance(exc, RunStateError):
            status = grpc.StatusCode.FAILED_PRECONDITION
        elif exc.code in ("unknown_agent", "unknown_agent_version", "invalid_request"):
            status = grpc.StatusCode.INVALID_ARGUMENT
        else:
            status = grpc.StatusCode.INTERNAL
        _abort(context, status, exc.code, exc.message)

    @_driver_errors
    def StartRun(self, request: pb.StartRunRequest, context: grpc.ServicerContext) -> pb.StartRunResponse:
        # `operator` of the agent's tenant: the checkpoint's StartRun decides it and records a refusal
        person = self._person(context)
        goal = goal_from_proto(request.goal)
        options: dict[str, Any] = {}
        provider = request.provider or self.driver.default_provider
        if provider == "scripted":
            if not request.script_yaml:
                raise GoalError("the scripted provider needs a script", code="script_required")
            try:
                options["script"] = parse_script(request.script_yaml, "script")
            except ScriptError as exc:
                raise GoalError(str(exc), code="invalid_script") from None
        elif provider != "anthropic":
            raise GoalError(f"unknown provider {provider!r}", code="unknown_provider")
        mode = "background" if request.mode == pb.RUN_MODE_BACKGROUND else "interactive"
        run = self.driver.start_run(request.agent, goal, owner=person, mode=mode, provider=provider,
                                    model=request.model or (self.driver.default_model if provider == "anthropic"
                                                            else "scripted"),
                                    provider_options=options, agent_version=request.agent_version,
                                    inputs=json_format.MessageToDict(request.inputs) if request.HasField("inputs")
                                    else None)
        return pb.StartRunResponse(run=run_to_proto(self.driver, run))

    @_driver_errors
    def GetRun(self, request: pb.GetRunRequest, context: grpc.ServicerContext) -> pb.GetRunResponse:
        _, run = self._on_run(context, "GetRun", request.run_id)
        return pb.GetRunResponse(run=run_to_proto(self.driver, run))

    @_driver_errors
    def ListRuns(self, request: pb.ListRunsRequest, context: grpc.ServicerContext) -> pb.ListRunsResponse:
        roles = self._roles(self._person(context))
        status = _STATUS_NAME.get(request.status) if request.status else None
        runs = self.driver.store.runs(status=status, limit=request.limit or 50, root_run_id=request.root_run_id,
                                      tenants=roles.tenants())  # only the tenants where they hold a role
        held = holders_of(self.driver, [r.run_id for r in runs])  # one query for the page
        return pb.ListRunsResponse(runs=[run_to_proto(self.driver, r, held.get(r.run_id), look_up_holder=False)
                                         for r in runs])

    def WatchRun(self, request: pb.WatchRunRequest, context: grpc.ServicerContext) -> Iterator[pb.WatchRunResponse]:
        try:
            self._on_run(context, "WatchRun", request.run_id)  # the roles as the stream begins
            stop = threading.Event()
            context.add_callback(stop.set)
            if request.no_follow:
                stop.set()
                events = iter(self.driver.store.events(request.run_id, request.after_seq, limit=100000))
            else:
                events = self.driver.store.follow(request.run_id, request.after_seq, stop,
                                                  until_waiting=request.until_waiting)
            for e in events:
                if self.stopping.is_set():
                    return
                yield pb.WatchRunResponse(event=pb.RunEvent(seq=e.seq, run_id=e.run_id, time=_ts(e.time),
                                                            kind=e.kind, data=_struct(e.data)))
        except DriverError as exc:
            self._fail(context, exc)
            raise
        except StoreError as exc:  # a watcher sends after_seq of its last event to go on
            _store_failed(context, exc)
            raise

    @_driver_errors
    def ApproveCall(self, request: pb.ApproveCallRequest, context: grpc.ServicerContext) -> pb.ApproveCallResponse:
        person = self._on_approval(context, "ApproveCall", request.approval_id)
        run = self.driver.approve(request.approval_id, person, request.note, approval_token=request.approval_token)
        return pb.ApproveCallResponse(run=run_to_proto(self.driver, run))

    @_driver_errors
    def RejectCall(self, request: pb.RejectCallRequest, context: grpc.ServicerContext) -> pb.RejectCallResponse:
        person = self._on_approval(context, "RejectCall", request.approval_id)
        run = self.driver.reject(request.approval_id, person, request.note,
                                 checkpoint_decision_id=request.rejection_decision_id)
        return pb.RejectCallResponse(run=run_to_proto(self.driver, run))

    @_driver_errors
    def ResumeRun(self, request: pb.ResumeRunRequest, context: grpc.ServicerContext) -> pb.ResumeRunResponse:
        person, _ = self._on_run(context, "ResumeRun", request.run_id)
        run, children = self.driver.resume_with_children(request.run_id, person, request.reply,
                                                         budget_to_dict(request.raise_budget))
        return pb.ResumeRunResponse(run=run_to_proto(self.driver, run),
                                    resumed_children=[run_to_proto(self.driver, c) for c in children])

    @_driver_errors
    def PauseRun(self, request: pb.PauseRunRequest, context: grpc.ServicerContext) -> pb.PauseRunResponse:
        person, _ = self._on_run(context, "PauseRun", request.run_id)
        run, children = self.driver.pause(request.run_id, person, request.reason)
        return pb.PauseRunResponse(run=run_to_proto(self.driver, run),
                                   paused_children=[run_to_proto(self.driver, c) for c in children])

    @_driver_errors
    def CancelRun(self, request: pb.CancelRunRequest, context: grpc.ServicerContext) -> pb.CancelRunResponse:
        person, _ = self._on_run(context, "CancelRun", request.run_id)
        run = self.driver.cancel(request.run_id, person, request.reason)
        return pb.CancelRunResponse(run=run_to_proto(self.driver, run))

    @_driver_errors
    def AmendGoal(self, request: pb.AmendGoalRequest, context: grpc.ServicerContext) -> pb.AmendGoalResponse:
        person, _ = self._on_run(context, "AmendGoal", request.run_id)
        version = self.driver.amend_goal(request.run_id, goal_from_proto(request.goal), person)
        return pb.AmendGoalResponse(goal_version=version)


class RunningDriver:
    def __init__(self, server: grpc.Server, servicer: DriverServicer, health_servicer: health.HealthServicer,
                 gate: Drain | None = None, metrics_server: MetricsServer | None = None,
                 store_watch: StoreWatch | None = None, deadlines: DeadlineWatch | None = None) -> None:
        self.deadlines = deadlines
        self.server = server
        self.servicer = servicer
        self.health = health_servicer
        self.gate = gate or Drain()
        self.metrics_server = metrics_server
        self.store_watch = store_watch

    def stop(self, grace: float = 2.0) -> None:
        """Drain: NOT_SERVING, new calls refused, WatchRun streams ended, other calls in flight get
        `grace` seconds; then the run loops stop (a run's state is in driver.db: `recover` resumes it)."""
        if self.store_watch is not None:
            self.store_watch.stop()  # a draining server's health stays NOT_SERVING
        drain(self.server, self.health, self.gate, grace, end_streams=self.servicer.stopping.set, name="driver")
        if self.deadlines is not None:
            self.deadlines.stop()
        self.servicer.driver.stop()
        if self.metrics_server is not None:
            self.metrics_server.stop()


def create_server(address: str, driver: Driver, operators: dict[bytes, str], *,
                  max_workers: int = 32, metrics_address: str | None = None,
                  deadline_interval: float = DEFAULT_INTERVAL) -> tuple[RunningDriver, int]:
    """Bind and start DriverService (port 0 picks a free one); recovers runs that were running, and
    tells runs waiting for an approval when its deadline passes (approval_deadlines.py).
    The metrics address is bound first: a taken port stops the start with
    `warden.metrics.MetricsAddressUnavailable` before the gRPC port is bound."""
    metrics_server = bind_first(metrics_address)
    try:
        return _create_server(address, driver, operators, max_workers, metrics_server, deadline_interval)
    except BaseException:
        if metrics_server is not None:
            metrics_server.stop()
        raise


def _create_server(address: str, driver: Driver, operators: dict[bytes, str], max_workers: int,
                   metrics_server: MetricsServer | None, deadline_interval: float) -> tuple[RunningDriver, int]:
    registry = base_registry("driver")
    gate = Drain(ServerMetrics(registry, "driver"))
    registry.register(FleetCollector(driver))
    # A caller that sends `traceparent` (an orchestrator starting runs) gets the run's start in its trace.
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="driver-rpc"),
                         interceptors=[gate, *tracing.server_interceptors()])
    servicer = DriverServicer(driver, operators)
    pb_grpc.add_DriverServiceServicer_to_server(servicer, server)
    health_servicer = add_health_and_reflection(server, SERVICE_NAME)
    port = bind_insecure(server, address)

    watch = StoreWatch(driver.store.ping, lambda up: _set_health(health_servicer, up), "the runs' store")

    def health_state() -> dict[str, Any]:
        store_up = watch.serving
        return {"status": "NOT_SERVING" if gate.draining or not store_up else "SERVING", "draining": gate.draining,
                "store": "answering" if store_up else "unavailable"}

    if metrics_server is not None:
        metrics_server.render, metrics_server.health = (lambda: render(registry)), health_state
    server.start()
    if metrics_server is not None:
        metrics_server.start()
        log.info("driver metrics on port %d", metrics_server.port)
    recovered = driver.recover()
    if recovered:
        log.info("recovered %d running run(s): %s", len(recovered), ", ".join(recovered))
    set_serving(health_servicer, SERVICE_NAME)
    watch.start()
    deadlines = DeadlineWatch(driver, deadline_interval).start()
    return RunningDriver(server, servicer, health_servicer, gate, metrics_server, watch, deadlines), port


def _set_health(servicer: health.HealthServicer, serving: bool) -> None:
    if serving:
        set_serving(servicer, SERVICE_NAME)
    else:
        for name in ("", SERVICE_NAME):
            servicer.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
