"""Shared value handling: activation checks and result normalisation for both engines."""

from __future__ import annotations

import datetime
import math
import sys
from collections.abc import Mapping

_BOOL_TYPES: tuple[type, ...] = (bool,)


def _bool_types() -> tuple[type, ...]:
    """bool, and cel-python's BoolType (it subclasses int, not bool) once celpy is loaded: a celpy
    value exists only then, and importing celpy here would cost every `warden check` its start."""
    global _BOOL_TYPES
    if len(_BOOL_TYPES) == 1:
        celtypes = sys.modules.get("celpy.celtypes")
        if celtypes is not None:
            _BOOL_TYPES = (bool, celtypes.BoolType)
    return _BOOL_TYPES

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def missing_variable(activation: Mapping[str, object], names: tuple[str, ...]) -> str | None:
    """Error text when a declared variable is absent, else None.

    Both engines would only notice when the expression touches the variable, and with
    different messages; checking up front makes "forgot to bind run" fail the same way
    everywhere, whichever rule happens to run.
    """
    for name in names:
        if name not in activation:
            return f"activation is missing declared variable '{name}'"
    return None


def normalise(value: object) -> object:
    """Turn engine-specific values into plain Python (bool, int, float, str, bytes, None,
    list, dict, datetime, timedelta). Works on cel-python wrappers (subclasses of the plain
    types) and on cel-expr-python's plain_value() output (bytearray for bytes)."""
    if value is None:
        return None
    if isinstance(value, _bool_types()):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, Mapping):
        return {normalise(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, datetime.datetime):
        return datetime.datetime.fromtimestamp(value.timestamp(), tz=datetime.UTC)
    if isinstance(value, datetime.timedelta):
        return datetime.timedelta(seconds=value.total_seconds())
    # Type values (`type(x)`) and anything exotic: a readable tag, never a truthy surprise
    # that could be mistaken for a condition result.
    return f"<cel:{value!r}>"


def same_value(a: object, b: object) -> bool:
    """Strict structural equality for normalised values: 1, 1.0 and True all differ,
    NaN equals NaN (both engines produced the same thing)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        assert isinstance(b, float)
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b
