"""The Connect protocol's wire forms for the HTTP door (http_door.py): request bodies to messages,
answers and errors to bodies, and the call context the gRPC handlers are given.

The HTTP door calls the very handlers gRPC calls (servicers/, through `grpc_api.method_handlers`),
so authentication, the drain gate, the malformed-request record and the error statuses are the same
code on both doors. What a handler reads of its call is small: the peer, the verified client
certificate, the headers (the bearer token, the trace id), and `abort_with_status` to end it.
`DoorContext` answers exactly those from the HTTP request; anything else a handler asked would
raise AttributeError rather than quietly answer wrong.

JSON is proto3 JSON (`google.protobuf.json_format`): field names in lowerCamelCase or as in the
proto, enums by name, 64-bit integers as strings. A field this checkpoint does not know, a key given
twice (in either spelling), or a value of the wrong type is a parse error, and the handler refuses
the request as `invalid_request`, on the record, as it does a binary request with an unknown field.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import status_pb2

from checkpoint.server.servicers.handling import Malformed, parser
from warden.checkpoint.v1 import checkpoint_pb2 as pb

JSON = "application/json"
PROTO = "application/proto"
STREAM_JSON = "application/connect+json"
STREAM_PROTO = "application/connect+proto"

# gRPC status -> (Connect code, HTTP status), from the Connect protocol's table
_CODES: dict[grpc.StatusCode, tuple[str, int]] = {
    grpc.StatusCode.CANCELLED: ("canceled", 499),
    grpc.StatusCode.UNKNOWN: ("unknown", 500),
    grpc.StatusCode.INVALID_ARGUMENT: ("invalid_argument", 400),
    grpc.StatusCode.DEADLINE_EXCEEDED: ("deadline_exceeded", 504),
    grpc.StatusCode.NOT_FOUND: ("not_found", 404),
    grpc.StatusCode.ALREADY_EXISTS: ("already_exists", 409),
    grpc.StatusCode.PERMISSION_DENIED: ("permission_denied", 403),
    grpc.StatusCode.RESOURCE_EXHAUSTED: ("resource_exhausted", 429),
    grpc.StatusCode.FAILED_PRECONDITION: ("failed_precondition", 400),
    grpc.StatusCode.ABORTED: ("aborted", 409),
    grpc.StatusCode.OUT_OF_RANGE: ("out_of_range", 400),
    grpc.StatusCode.UNIMPLEMENTED: ("unimplemented", 501),
    grpc.StatusCode.INTERNAL: ("internal", 500),
    grpc.StatusCode.UNAVAILABLE: ("unavailable", 503),
    grpc.StatusCode.DATA_LOSS: ("data_loss", 500),
    grpc.StatusCode.UNAUTHENTICATED: ("unauthenticated", 401),
}
_DETAIL_TYPE = pb.ErrorDetail.DESCRIPTOR.full_name


class Aborted(Exception):
    """A handler ended the call (`context.abort`): the status it ended it with."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: Iterable[tuple[str, Any]] = ()):
        super().__init__(details)
        self.code = code
        self.details = details
        self.trailing = tuple(trailing or ())


@dataclass
class DoorError:
    """An answer that is an error: its HTTP status and its Connect error body."""

    http_status: int
    body: dict[str, Any]

    def encoded(self) -> bytes:
        return json.dumps(self.body, separators=(",", ":")).encode()


def door_error(status: grpc.StatusCode, code: str, message: str, field: str = "") -> DoorError:
    """An error of the door itself (a method it does not serve, a body too large), shaped as the
    handlers' errors are: the Connect code, `code: message`, and the ErrorDetail with the stable code."""
    return _error(status, f"{code}: {message}", pb.ErrorDetail(code=code, message=message, field=field))


def from_aborted(aborted: Aborted) -> DoorError:
    detail = None
    for key, value in aborted.trailing:
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for item in status.details:
                if item.Is(pb.ErrorDetail.DESCRIPTOR):
                    detail = pb.ErrorDetail()
                    item.Unpack(detail)
    if detail is None:  # an abort with a plain message (the drain gate): `code: message`
        code, _, message = aborted.details.partition(": ")
        detail = pb.ErrorDetail(code=code, message=message or aborted.details)
    return _error(aborted.code, aborted.details, detail)


def _error(status: grpc.StatusCode, message: str, detail: pb.ErrorDetail) -> DoorError:
    connect_code, http_status = _CODES.get(status, ("unknown", 500))
    return DoorError(http_status, {
        "code": connect_code,
        "message": message,
        # Connect's error details: the ErrorDetail in binary (what Connect clients unpack), and
        # as JSON under `debug` for a person reading curl's output
        "details": [{
            "type": _DETAIL_TYPE,
            "value": base64.b64encode(detail.SerializeToString()).decode().rstrip("="),
            "debug": json_format.MessageToDict(detail),
        }],
    })


def decoder(cls: Any, content_type: str) -> Callable[[bytes], Any]:
    """Body bytes -> the request message, or a `Malformed` the handler refuses on the record."""
    if content_type in (PROTO, STREAM_PROTO):
        return parser(cls)  # the gRPC door's own: unknown fields refused the same way

    def parse_json(data: bytes) -> Any:
        message = cls()
        if not data.lstrip()[:1] == b"{":  # json_format takes `[]` (and `null`) for an empty message
            return Malformed(cls.DESCRIPTOR.name, "not a JSON object", (
                f"the request is not a well-formed {cls.DESCRIPTOR.name} in proto3 JSON: a JSON object is expected"
            ))
        try:
            json_format.Parse(data.decode("utf-8"), message, ignore_unknown_fields=False)
        except (json_format.ParseError, UnicodeDecodeError, RecursionError, ValueError, TypeError) as exc:
            return Malformed(cls.DESCRIPTOR.name, str(exc)[:300], (
                f"the request is not a well-formed {cls.DESCRIPTOR.name} in proto3 JSON: {str(exc)[:300]}"
            ))
        return message

    return parse_json


def encode(message: Message, content_type: str) -> bytes:
    if content_type in (PROTO, STREAM_PROTO):
        return message.SerializeToString()
    return json_format.MessageToJson(message, indent=None).encode()


def envelope(payload: bytes, *, end: bool = False) -> bytes:
    """One message of a Connect stream: a flags byte (0x02: the end of the stream) and its length."""
    return struct.pack(">BI", 0x02 if end else 0x00, len(payload)) + payload


def end_of_stream(error: DoorError | None) -> bytes:
    return envelope(json.dumps({"error": error.body} if error else {}, separators=(",", ":")).encode(), end=True)


class DoorContext:
    """What a gRPC handler reads of its call, answered from the HTTP request (see the module's docstring)."""

    def __init__(self, peer: str, identities: list[bytes] | None, headers: list[tuple[str, str]]):
        self._peer = peer
        self._identities = identities
        self._headers = tuple(headers)
        self._callbacks: list[Callable[[], None]] = []
        self._code: grpc.StatusCode | None = None
        self._active = True

    def peer(self) -> str:
        return self._peer

    def peer_identities(self) -> list[bytes] | None:
        return self._identities

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self._headers

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        raise Aborted(code, details)

    def abort_with_status(self, status: grpc.Status) -> None:
        self._code = status.code
        raise Aborted(status.code, status.details, status.trailing_metadata)

    def code(self) -> grpc.StatusCode | None:
        """What the handler aborted with, as a gRPC handler's metrics read it; None while it has not."""
        return self._code

    def is_active(self) -> bool:
        return self._active

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._callbacks.append(callback)
        return True

    def done(self) -> None:
        """The call is over (its client went away, or its answer was sent): what the handler asked to hear."""
        self._active = False
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
