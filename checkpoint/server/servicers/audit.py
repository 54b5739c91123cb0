"""Reads of the record: WatchDecisions (the decision log as it grows, within the caller's tenants)
and AgentStats (an agent's versions as the log counts them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc

from checkpoint.server import tracing
from checkpoint.server.servicers.handling import (
    SERVICE_NAME,
    UNAUTHENTICATED,
    Handling,
    Watchers,
    parser,
    stream_code,
    well_formed,
)
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import ServiceError, Unavailable, abort


def handlers(kit: Handling, *, max_watchers: int) -> dict[str, grpc.RpcMethodHandler]:
    service = kit.service
    return {
        "AgentStats": kit.unary(service.agent_stats.agent_stats, pb.AgentStatsRequest, pb.AgentStatsResponse),
        "WatchDecisions": grpc.unary_stream_rpc_method_handler(
            _watch_decisions(kit, Watchers(max_watchers)),
            request_deserializer=parser(pb.WatchDecisionsRequest),
            response_serializer=pb.WatchDecisionsResponse.SerializeToString,
        ),
    }


def _watch_decisions(kit: Handling, watchers: Watchers) -> Any:
    service, auth, on_unauthenticated, gate = kit.service, kit.auth, kit.on_unauthenticated, kit.gate
    watch_method = "/" + SERVICE_NAME + "/WatchDecisions"
    calls = service.metrics.server.method(watch_method)  # one call per stream, for as long as it is open

    def watch(request: Any, context: grpc.ServicerContext) -> Iterator[pb.WatchDecisionsResponse]:
        if not gate.enter():
            gate.refuse(context, watch_method)
        opened, failed = time.perf_counter(), True
        try:
            yield from _watch(request, context)
            failed = False
        finally:
            calls.finished(stream_code(context, failed), time.perf_counter() - opened)
            gate.leave()

    def _watch(request: Any, context: grpc.ServicerContext) -> Iterator[pb.WatchDecisionsResponse]:
        try:
            caller = auth.identity(context, watch_method)
            if caller is None:
                traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
                try:  # the refusal is the one record a stream makes
                    on_unauthenticated(watch_method, request, context)
                finally:
                    tracing.current.reset(traced)
                raise UNAUTHENTICATED
            well_formed(request)
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

    return watch
