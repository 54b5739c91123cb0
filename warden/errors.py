"""Errors the service raises, and the one place they become gRPC statuses.

    ServiceError                 base: a stable ``code``, a ``message``, the ``field`` at fault
    ├── InvalidArgument          INVALID_ARGUMENT: the request is not well formed (``invalid_request``,
    │                            ``unknown_agent``, ``batch_too_large`` ...)
    ├── Unauthenticated          UNAUTHENTICATED: no valid credentials (``unauthenticated``)
    ├── PermissionDenied         PERMISSION_DENIED: the caller's principal may not do this
    │                            (``caller_not_permitted``)
    └── Unavailable              UNAVAILABLE: the checkpoint cannot decide (``policy_error``: no
                                 policy set loaded yet)

A DENY is never an error: it is a normal CheckResponse. Errors are for requests that cannot be
decided at all. The stable code travels in the status details as a ``warden.checkpoint.v1.ErrorDetail``
packed into ``google.rpc.Status`` (the ``grpc-status-details-bin`` trailer), which every gRPC
language reads with its standard status helpers.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2
from grpc_status import rpc_status

from warden.checkpoint.v1 import checkpoint_pb2 as pb


class ServiceError(Exception):
    status = grpc.StatusCode.INTERNAL

    def __init__(self, code: str, message: str, field: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field

    def detail(self) -> pb.ErrorDetail:
        return pb.ErrorDetail(code=self.code, message=self.message, field=self.field)


class InvalidArgument(ServiceError):
    status = grpc.StatusCode.INVALID_ARGUMENT


class Unauthenticated(ServiceError):
    status = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(ServiceError):
    status = grpc.StatusCode.PERMISSION_DENIED


class Unavailable(ServiceError):
    status = grpc.StatusCode.UNAVAILABLE


def to_status(error: ServiceError) -> grpc.Status:
    detail = any_pb2.Any()
    detail.Pack(error.detail())
    message = f"{error.code}: {error.message}"
    return rpc_status.to_status(
        status_pb2.Status(code=error.status.value[0], message=message, details=[detail])
    )


def abort(context: grpc.ServicerContext, error: ServiceError) -> None:
    """End the call with the error's status; raises, as `context.abort` does."""
    context.abort_with_status(to_status(error))


def error_detail_of(rpc_error: grpc.RpcError) -> pb.ErrorDetail | None:
    """Client side: the ErrorDetail carried by a failed call, if any."""
    status = rpc_status.from_call(rpc_error)  # type: ignore[arg-type]
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(pb.ErrorDetail.DESCRIPTOR):
            out = pb.ErrorDetail()
            detail.Unpack(out)
            return out
    return None
