"""The gRPC face of the service: thin handlers, and the one place errors become statuses.

Handlers are built here rather than through the generated `add_..._to_server`, for two reasons:
the request deserializer (the generated one lets a message that does not parse fail inside gRPC
with an opaque INTERNAL, and keeps fields it does not know without a word; ours hands the handler
a marker for both, so the caller gets INVALID_ARGUMENT with the stable code `invalid_request` like
any other bad request, and the refusal is recorded), and the caller's identity, which every
service method takes: the handler authenticates the call once and passes it on. Health and
reflection are separate services, open to probes.

The SIGTERM drain gate (warden/drain.py) is asked here, first thing in each handler, rather than
as a server interceptor: an interceptor runs on grpcio's one polling thread for every call, and a
server with none skips its interceptor pipeline altogether (tracing's, when configured, still
runs there). The methods are registered with grpcio by name (`method_handlers`), so its C core
matches them without the generic handlers' per-call lookup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from checkpoint.server import tracing, wire
from checkpoint.server.service import CheckpointService
from warden.auth import AuthPolicy, OnRefused
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.drain import Drain
from warden.errors import InvalidArgument, ServiceError, Unauthenticated, Unavailable, abort

SERVICE_NAME = "warden.checkpoint.v1.CheckpointService"


class Malformed:
    """Stands in for a request whose bytes did not parse as the expected message, or that carried
    fields this checkpoint does not know (which protobuf would otherwise silently ignore)."""

    def __init__(self, message_type: str, error: str, reason: str = ""):
        self.message_type = message_type
        self.error = error
        self.reason = reason or f"the request is not a well-formed {message_type}"


def _parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            message = cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as exc:
            return Malformed(cls.DESCRIPTOR.name, str(exc))
        if wire.has_unknown_fields(message):
            where = wire.unknown_field(cls.FromString(data))
            return Malformed(cls.DESCRIPTOR.name, f"unknown field at {where}", (
                f"the request carries a field this checkpoint does not know ({where}); "
                "it would be ignored, so the request is refused"
            ))
        return message

    return parse


def _well_formed(request: Any) -> None:
    if isinstance(request, Malformed):
        raise InvalidArgument("invalid_request", request.reason)


UNAUTHENTICATED = Unauthenticated("unauthenticated", "a valid bearer token or client certificate is required")


def _unary(
    fn: Callable[[Any, str], Any], latency: Any, service: CheckpointService, auth: AuthPolicy,
    on_unauthenticated: OnRefused, method: str, gate: Drain,
) -> Callable[[Any, grpc.ServicerContext], Any]:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        if not gate.enter():
            gate.refuse(context, method)  # draining: UNAVAILABLE server_draining, nothing recorded
        started = time.perf_counter()
        # the one header read for the record: the caller's trace id, if it sent a valid one
        traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
        try:
            caller = auth.identity(context)
            if caller is None:
                on_unauthenticated(method, request, context)
                raise UNAUTHENTICATED
            if isinstance(request, Malformed):
                service.record_malformed(request.reason)
            _well_formed(request)
            return fn(request, caller)
        except ServiceError as exc:
            abort(context, exc)
        finally:
            tracing.current.reset(traced)
            latency.observe(time.perf_counter() - started)
            gate.leave()

    return handle


class Watchers:
    """Caps concurrent streams of one kind (WatchDecisions, CheckStream): each holds a server thread
    while it is open."""

    def __init__(self, limit: int):
        self._sem = threading.BoundedSemaphore(limit)
        self.limit = limit

    def acquire(self) -> bool:
        return self._sem.acquire(blocking=False)

    def release(self) -> None:
        self._sem.release()


def handlers(service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, *,
             max_watchers: int = 16, max_check_streams: int = 8, gate: Drain | None = None) -> grpc.GenericRpcHandler:
    """The service as one generic handler (for servers that take no registered methods)."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, method_handlers(service, auth, on_unauthenticated, max_watchers=max_watchers,
                                      max_check_streams=max_check_streams, gate=gate))


def _check_stream(service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, gate: Drain,
                  streams: Watchers) -> Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]:
    """CheckStream: each request decided, recorded and answered as a Check is, in order. The caller
    is authenticated once, when the stream opens. A request that Check would refuse with an error
    status gets that error as its answer, and the stream goes on. The drain gate counts each request
    being decided, not an open stream: a request that comes while draining ends the stream with
    UNAVAILABLE `server_draining`, and a stream left idle ends with the server at the end of the grace."""
    method = "/" + SERVICE_NAME + "/CheckStream"
    latency = service.metrics.check_seconds.labels("check_stream")

    def handle(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[pb.CheckStreamResponse]:
        traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
        try:
            try:
                caller = auth.identity(context)
                if caller is None:  # recorded once, as the stream opens: no request is read
                    on_unauthenticated(method, pb.CheckStreamRequest(), context)
                    raise UNAUTHENTICATED
                if not streams.acquire():
                    raise Unavailable("too_many_streams", f"at most {streams.limit} check streams at once")
            except ServiceError as exc:
                abort(context, exc)
            assert caller is not None
            try:
                for item in requests:
                    if not gate.enter():
                        gate.refuse(context, method)  # draining: UNAVAILABLE server_draining, nothing recorded
                    started = time.perf_counter()
                    try:
                        yield _answer(service, item, caller)
                    finally:
                        latency.observe(time.perf_counter() - started)
                        gate.leave()
            finally:
                streams.release()
        finally:
            tracing.current.reset(traced)

    return handle


def _answer(service: CheckpointService, item: Any, caller: str) -> pb.CheckStreamResponse:
    if isinstance(item, Malformed):
        service.record_malformed(item.reason)
        return pb.CheckStreamResponse(error=pb.ErrorDetail(code="invalid_request", message=item.reason))
    if not item.HasField("request"):
        return pb.CheckStreamResponse(correlation_id=item.correlation_id, error=pb.ErrorDetail(
            code="invalid_request", message="the stream's request holds no CheckRequest", field="request"))
    try:
        return pb.CheckStreamResponse(correlation_id=item.correlation_id, response=service.check(item.request, caller))
    except ServiceError as exc:
        return pb.CheckStreamResponse(correlation_id=item.correlation_id, error=exc.detail())


def method_handlers(service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, *,
                    max_watchers: int = 16, max_check_streams: int = 8,
                    gate: Drain | None = None) -> dict[str, grpc.RpcMethodHandler]:
    """Each method's handler by name. `on_unauthenticated(method, request, context)` records (or
    only counts) a refusal; `gate` counts calls in flight and refuses new ones while draining."""
    watchers = Watchers(max_watchers)
    gate = gate or Drain()
    watch_method = "/" + SERVICE_NAME + "/WatchDecisions"

    def watch(request: Any, context: grpc.ServicerContext) -> Iterator[pb.WatchDecisionsResponse]:
        if not gate.enter():
            gate.refuse(context, watch_method)
        try:
            yield from _watch(request, context)
        finally:
            gate.leave()

    def _watch(request: Any, context: grpc.ServicerContext) -> Iterator[pb.WatchDecisionsResponse]:
        try:
            caller = auth.identity(context)
            if caller is None:
                traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
                try:  # the refusal is the one record a stream makes
                    on_unauthenticated(watch_method, request, context)
                finally:
                    tracing.current.reset(traced)
                raise UNAUTHENTICATED
            _well_formed(request)
            tenants = service.stream.watch_tenants(caller)
            if not watchers.acquire():
                raise Unavailable("too_many_watchers", f"at most {watchers.limit} decision streams at once")
        except ServiceError as exc:
            abort(context, exc)
        stop = threading.Event()
        try:
            # Wakes the follower at once when the client goes away or the server stops.
            def on_done() -> None:
                stop.set()
                service.stream.wake_watchers()

            context.add_callback(on_done)
            yield from service.stream.watch(request, stop, tenants, caller)
        except ServiceError as exc:
            abort(context, exc)
        finally:
            watchers.release()

    def unary(fn: Callable[[Any, str], Any], req: Any, resp: Any) -> grpc.RpcMethodHandler:
        latency = service.metrics.check_seconds.labels(fn.__name__)
        method = f"/{SERVICE_NAME}/{req.DESCRIPTOR.name.removesuffix('Request')}"
        return grpc.unary_unary_rpc_method_handler(
            _unary(fn, latency, service, auth, on_unauthenticated, method, gate),
            request_deserializer=_parser(req),
            response_serializer=resp.SerializeToString,
        )

    return {
            "Check": unary(service.check, pb.CheckRequest, pb.CheckResponse),
            "CheckBatch": unary(service.check_batch, pb.CheckBatchRequest, pb.CheckBatchResponse),
            "CheckStream": grpc.stream_stream_rpc_method_handler(
                _check_stream(service, auth, on_unauthenticated, gate, Watchers(max_check_streams)),
                request_deserializer=_parser(pb.CheckStreamRequest),
                response_serializer=pb.CheckStreamResponse.SerializeToString,
            ),
            "CheckPlan": unary(service.check_plan, pb.CheckPlanRequest, pb.CheckPlanResponse),
            "ResolveAgent": unary(service.resolve_agent, pb.ResolveAgentRequest, pb.ResolveAgentResponse),
            "StartRun": unary(service.run_acts.start_run, pb.StartRunRequest, pb.StartRunResponse),
            "Approve": unary(service.approval_acts.approve, pb.ApproveRequest, pb.ApproveResponse),
            "Reject": unary(service.approval_acts.reject, pb.RejectRequest, pb.RejectResponse),
            "RecordAct": unary(service.run_acts.record_act, pb.RecordActRequest, pb.RecordActResponse),
            "ListAgents": unary(service.catalog.list_agents, pb.ListAgentsRequest, pb.ListAgentsResponse),
            "AgentHistory": unary(service.catalog.agent_history, pb.AgentHistoryRequest, pb.AgentHistoryResponse),
            "ProposeAgentChange": unary(service.catalog.propose, pb.ProposeAgentChangeRequest, pb.CatalogActResponse),
            "ReviewAgentChange": unary(service.catalog.review, pb.ReviewAgentChangeRequest, pb.CatalogActResponse),
            "RetireAgentVersion": unary(service.catalog.retire, pb.RetireAgentVersionRequest, pb.CatalogActResponse),
            "Roles": unary(service.roles, pb.RolesRequest, pb.RolesResponse),
            "TokenKeys": unary(service.token_keys_rpc, pb.TokenKeysRequest, pb.TokenKeysResponse),
            "AgentStats": unary(service.agent_stats.agent_stats, pb.AgentStatsRequest, pb.AgentStatsResponse),
            # skills and templates (docs/skills.md)
            "ListCatalogEntries": unary(service.entries.list_entries, pb.ListCatalogEntriesRequest,
                                        pb.ListCatalogEntriesResponse),
            "CatalogEntryHistory": unary(service.entries.history, pb.CatalogEntryHistoryRequest,
                                         pb.CatalogEntryHistoryResponse),
            "ProposeCatalogEntry": unary(service.entries.propose, pb.ProposeCatalogEntryRequest,
                                         pb.CatalogEntryActResponse),
            "ReviewCatalogEntry": unary(service.entries.review, pb.ReviewCatalogEntryRequest,
                                        pb.CatalogEntryActResponse),
            "RetireCatalogEntry": unary(service.entries.retire, pb.RetireCatalogEntryRequest,
                                        pb.CatalogEntryActResponse),
            "RunSkills": unary(service.entries.run_skills, pb.RunSkillsRequest, pb.RunSkillsResponse),
            "LoadSkill": unary(service.entries.load_skill, pb.LoadSkillRequest, pb.LoadSkillResponse),
            "ProposeLearning": unary(service.learnings.propose_learning, pb.ProposeLearningRequest, pb.LearningActResponse),
            "ReviewLearning": unary(service.learnings.review_learning, pb.ReviewLearningRequest, pb.LearningActResponse),
            "ListLearnings": unary(service.learnings.list_learnings, pb.ListLearningsRequest, pb.ListLearningsResponse),
            "RunLessons": unary(service.learnings.run_lessons, pb.RunLessonsRequest, pb.RunLessonsResponse),
            "WatchDecisions": grpc.unary_stream_rpc_method_handler(
                watch,
                request_deserializer=_parser(pb.WatchDecisionsRequest),
                response_serializer=pb.WatchDecisionsResponse.SerializeToString,
            ),
        }
