"""What a failed call to a warden service means to its caller, in one place.

An unreachable peer (UNAVAILABLE, DEADLINE_EXCEEDED, CANCELLED) and a checkpoint that cannot record
(`audit_unavailable`) are "unavailable": the caller must fail closed, nothing runs. Any other gRPC
error keeps the stable code the peer put in its ErrorDetail (or in the `warden-code` trailer).
"""

from __future__ import annotations

import grpc

from warden.errors import error_detail_of

UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED)
_BY_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: "invalid_request",
    grpc.StatusCode.UNAUTHENTICATED: "unauthenticated",
    grpc.StatusCode.PERMISSION_DENIED: "caller_not_permitted",
}


class ClientError(Exception):
    """A refused or failed request, with the stable code the service gave."""

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class CheckpointUnavailable(ClientError):
    """The checkpoint cannot be reached or cannot record: refuse the call (fail closed)."""


def detail_code(err: grpc.RpcError) -> str:
    try:
        detail = error_detail_of(err)
    except Exception:  # noqa: BLE001 - details we cannot read are simply absent
        detail = None
    if detail is not None and detail.code:
        return detail.code
    for key, value in (err.trailing_metadata() or ()):  # type: ignore[attr-defined]
        if key == "warden-code" and isinstance(value, str):
            return value
    return ""


def classify(err: grpc.RpcError, who: str) -> tuple[bool, str, str]:
    """(unavailable, stable code, message) of a failed call to `who` ("checkpoint", "toolrunner")."""
    status = err.code()  # type: ignore[attr-defined]
    message = err.details() or str(status)  # type: ignore[attr-defined]
    if status in UNREACHABLE:
        return True, f"{who}_unavailable", f"{who} unreachable: {message}"
    code = detail_code(err) or _BY_STATUS.get(status, f"{who}_error")
    # a checkpoint that cannot record cannot decide: unavailable too
    return code == "audit_unavailable", code, f"{who}: {message}"


def client_error(err: grpc.RpcError) -> ClientError:
    unavailable, code, message = classify(err, "checkpoint")
    return (CheckpointUnavailable if unavailable else ClientError)(message, code=code)
