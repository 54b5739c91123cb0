"""Canonical JSON: one byte string per value, so hashes of arguments agree across processes.

Keys sorted, no whitespace, UTF-8, and numbers that are whole written as integers: the
arguments reach the checkpoint through a protobuf Struct (every number a double) and the driver
as plain JSON, and both must hash the same.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

# One encoder for every call: `json.dumps` with options builds a fresh encoder each time, which
# costs more than encoding a small argument dict. Output is identical.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode = _ENCODER.encode


def normalise(value: Any) -> Any:
    """Plain JSON types, whole floats as ints; NaN and infinities are refused (not JSON)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite number")
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _is_normal(value: Any) -> bool:
    """True when `normalise(value)` would return an equal value of the same exact types.

    Checking allocates nothing, so the common case (string, integer, boolean and null leaves
    under string keys) skips building a normalised copy. Floats, tuples, subclasses and anything
    else take the full `normalise`, so the bytes never depend on which path ran.
    """
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _is_normal(item):
                return False
        return True
    if kind is list:
        for item in value:
            if not _is_normal(item):
                return False
        return True
    return False


def dumps(value: Any) -> bytes:
    return _encode(value if _is_normal(value) else normalise(value)).encode()


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(dumps(value)).hexdigest()
