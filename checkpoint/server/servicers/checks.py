"""The decision methods: Check, CheckBatch, CheckPlan, CheckStream, and ResolveAgent (the agent
version a run would be checked against)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import grpc

from checkpoint.server import tracing
from checkpoint.server.service import CheckpointService
from checkpoint.server.servicers.handling import (
    SERVICE_NAME,
    UNAUTHENTICATED,
    Handling,
    Malformed,
    Watchers,
    parser,
    stream_code,
)
from checkpoint.server.servicers.pipeline import pipelined
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import ServiceError, Unavailable, abort


def handlers(kit: Handling, *, max_check_streams: int) -> dict[str, grpc.RpcMethodHandler]:
    service = kit.service
    return {
        "Check": kit.unary(service.check, pb.CheckRequest, pb.CheckResponse),
        "CheckBatch": kit.unary(service.check_batch, pb.CheckBatchRequest, pb.CheckBatchResponse),
        "CheckStream": grpc.stream_stream_rpc_method_handler(
            _check_stream(kit, Watchers(max_check_streams)),
            request_deserializer=parser(pb.CheckStreamRequest),
            response_serializer=pb.CheckStreamResponse.SerializeToString,
        ),
        "CheckPlan": kit.unary(service.check_plan, pb.CheckPlanRequest, pb.CheckPlanResponse),
        "ResolveAgent": kit.unary(service.queries.resolve_agent, pb.ResolveAgentRequest, pb.ResolveAgentResponse),
    }


def _check_stream(kit: Handling, streams: Watchers) -> Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]:
    """CheckStream: each request decided, recorded and answered as a Check is, answers in request
    order, several requests of a stream decided at once (pipeline.py). The caller is authenticated
    once, when the stream opens. A request that Check would refuse with an error status gets that
    error as its answer, and the stream goes on. The drain gate counts each request from its read
    until its answer left, not an open stream: a request that comes while draining ends the stream
    with UNAVAILABLE `server_draining` after the answers before it, and a stream left idle ends with
    the server at the end of the grace."""
    service, auth, on_unauthenticated, gate = kit.service, kit.auth, kit.on_unauthenticated, kit.gate
    method = "/" + SERVICE_NAME + "/CheckStream"
    latency = service.metrics.check_seconds.labels("check_stream")
    calls = service.metrics.server.method(method)  # one call per stream, for as long as it is open

    def handle(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[pb.CheckStreamResponse]:
        opened, failed = time.perf_counter(), True
        traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
        try:
            try:
                caller = auth.identity(context, method)
                if caller is None:  # recorded once, as the stream opens: no request is read
                    on_unauthenticated(method, pb.CheckStreamRequest(), context)
                    raise UNAUTHENTICATED
                if not streams.acquire():
                    raise Unavailable("too_many_streams", f"at most {streams.limit} check streams at once")
            except ServiceError as exc:
                abort(context, exc)
            assert caller is not None
            try:
                # up to pipeline.WINDOW of this stream's requests decided at once, answered in order
                yield from pipelined(requests, lambda item: _answer(service, item, caller), gate,
                                     on_draining=lambda: gate.refuse(context, method), observe=latency.observe,
                                     clock=time.perf_counter)
                failed = False
            finally:
                streams.release()
        finally:
            tracing.current.reset(traced)
            calls.finished(stream_code(context, failed), time.perf_counter() - opened)

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
