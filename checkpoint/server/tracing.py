"""The W3C trace id a request carries (`traceparent` gRPC metadata), for its decision record.

Read once per recorded RPC and kept in a context variable for the handler's thread, so every record
the call appends carries it without the service's methods passing it along. A header is only ever
a label: it is parsed to its 32 hex digits and nothing else of it is kept; a malformed one (or
several) is ignored, never an error, so a caller's tracing can never fail or change a decision.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Iterable
from typing import Any

HEADER = "traceparent"
# version "-" trace-id "-" parent-id "-" flags; lowercase hex only (W3C Trace Context, level 1).
# A future version may append "-" fields; version ff is invalid; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?", re.DOTALL)
_MAX_LENGTH = 512
_ZERO_TRACE, _ZERO_PARENT = "0" * 32, "0" * 16

current: contextvars.ContextVar[str | None] = contextvars.ContextVar("warden_trace_id", default=None)


def parse_traceparent(value: Any) -> str | None:
    """The trace id of a `traceparent` value, or None when it is not a valid one."""
    if type(value) is not str or len(value) > _MAX_LENGTH:
        return None
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:
        return None
    return trace_id


def trace_id_of(metadata: Iterable[tuple[str, Any]] | None) -> str | None:
    """The trace id of the call's metadata: its one `traceparent` header, if valid. Two headers
    are ambiguous (W3C: not to be trusted), so none is taken."""
    found = None
    for key, value in metadata or ():
        if key == HEADER:
            if found is not None:
                return None
            found = value
    return parse_traceparent(found)
