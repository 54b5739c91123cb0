"""What every servicer method shares: the request parser that refuses malformed bytes and unknown
fields, the caller's authentication, the drain gate, the trace id, and the one place errors become
statuses. Servicer families ask `Handling.unary` for each of their unary methods."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from checkpoint.server import tracing, wire
from checkpoint.server.service import CheckpointService
from warden.auth import AuthPolicy, OnRefused
from warden.drain import Drain
from warden.errors import InvalidArgument, ServiceError, Unauthenticated, Unavailable, abort
from warden.metrics import MethodCalls, status_name
from warden.store.errors import StoreError

SERVICE_NAME = "warden.checkpoint.v1.CheckpointService"


class Malformed:
    """Stands in for a request whose bytes did not parse as the expected message, or that carried
    fields this checkpoint does not know (which protobuf would otherwise silently ignore)."""

    def __init__(self, message_type: str, error: str, reason: str = ""):
        self.message_type = message_type
        self.error = error
        self.reason = reason or f"the request is not a well-formed {message_type}"


def parser(cls: Any) -> Callable[[bytes], Any]:
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

    parse.message_class = cls  # type: ignore[attr-defined]  # the HTTP door decodes JSON into it
    return parse


def well_formed(request: Any) -> None:
    if isinstance(request, Malformed):
        raise InvalidArgument("invalid_request", request.reason)


UNAUTHENTICATED = Unauthenticated("unauthenticated", "a valid bearer token or client certificate is required")


def unary_handler(
    fn: Callable[[Any, str], Any], latency: Any, service: CheckpointService, auth: AuthPolicy,
    on_unauthenticated: OnRefused, method: str, gate: Drain, calls: MethodCalls,
) -> Callable[[Any, grpc.ServicerContext], Any]:
    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        if not gate.enter():
            gate.refuse(context, method)  # draining: UNAVAILABLE server_draining, nothing recorded
        started = time.perf_counter()
        # the status is known here, where each error becomes one: no context.code() per call
        code = "OK"
        # the one header read for the record: the caller's trace id, if it sent a valid one
        traced = tracing.current.set(tracing.trace_id_of(context.invocation_metadata()))
        try:
            caller = auth.identity(context, method)
            if caller is None:
                on_unauthenticated(method, request, context)
                raise UNAUTHENTICATED
            if isinstance(request, Malformed):
                service.record_malformed(request.reason)
            well_formed(request)
            return fn(request, caller)
        except ServiceError as exc:
            code = exc.status.name
            abort(context, exc)
        except StoreError as exc:  # a read of the shared store (a list, a history) when it is down or slow
            code = "UNAVAILABLE"
            abort(context, Unavailable(exc.code, str(exc)[:500]))
        except BaseException:  # grpc answers UNKNOWN for what a handler lets escape
            code = "UNKNOWN"
            raise
        finally:
            tracing.current.reset(traced)
            seconds = time.perf_counter() - started
            latency.observe(seconds)
            calls.finished(code, seconds)
            gate.leave()

    return handle


# the status a stream ended with (a watch's usual end is its client going: CANCELLED)
stream_code = status_name


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


class Handling:
    """The service and the plumbing each servicer family builds its handlers with."""

    def __init__(self, service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, gate: Drain):
        self.service = service
        self.auth = auth
        self.on_unauthenticated = on_unauthenticated
        self.gate = gate

    def unary(self, fn: Callable[[Any, str], Any], req: Any, resp: Any) -> grpc.RpcMethodHandler:
        # the latency's label is the method's Python name, as it always was
        latency = self.service.metrics.check_seconds.labels(fn.__name__)
        method = f"/{SERVICE_NAME}/{req.DESCRIPTOR.name.removesuffix('Request')}"
        calls = self.service.metrics.server.method(method)
        return grpc.unary_unary_rpc_method_handler(
            unary_handler(fn, latency, self.service, self.auth, self.on_unauthenticated, method, self.gate, calls),
            request_deserializer=parser(req),
            response_serializer=resp.SerializeToString,
        )
