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


def dumps(value: Any) -> bytes:
    return json.dumps(
        normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(dumps(value)).hexdigest()
