"""Canonical JSON: one byte string per value, so hashes agree across processes and languages.

The recipe is RFC 8785, the JSON Canonicalization Scheme (JCS): keys sorted by their UTF-16 code
units, no whitespace, UTF-8, strings escaped only where JSON requires it, and numbers written as
ECMAScript writes a double (`1e-7`, `5` for 5.0, `1e+21`). Any JCS implementation (Node's
`canonicalize`, Go's, Java's) gives the same bytes, so a verifier in another language recomputes
the same hashes: grants, call digests, run tokens' claims, and the arguments column of the
decision log all use it (docs/audit.md, "Canonical JSON").

Two paths, one output. `rfc8785` (the reference for the bytes) is pure Python and costs several
times the standard library's C encoder, on the hot path of every decision. So values made only
of strings, integers within +-(2**53 - 1), booleans, null, fractional floats from 1e-4 to 1e16 in
magnitude, lists and objects whose keys have no character above U+FFFF go through `json`'s C
encoder, whose output for exactly those values is RFC 8785's byte for byte
(tests/contracts/test_canonical.py proves it against `rfc8785.dumps` with generated values);
anything else (whole floats, exponent-sized floats, tuples, subclasses, astral keys) goes
through the library.

Numbers outside JSON's interoperable range are refused with ValueError, never rounded:
NaN and infinities (not JSON), and integers beyond +-(2**53 - 1) (RFC 8785 and I-JSON: a double
cannot hold them, so another verifier would read a different number). A whole float is written
as an integer (5.0 -> `5`), as RFC 8785 does: the checkpoint gets every number as a double (a
protobuf Struct), the driver and the toolrunner as plain JSON, and both hash the same.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import rfc8785

MAX_SAFE_INTEGER = 2**53 - 1
_MIN_SAFE_INTEGER = -MAX_SAFE_INTEGER

# One encoder for every call: `json.dumps` with options builds a fresh encoder each time, which
# costs more than encoding a small argument dict.
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_encode = _ENCODER.encode
# Python sorts keys by code point, RFC 8785 by UTF-16 code unit: the two orders differ only when a
# key holds a character above U+FFFF (a surrogate pair sorts before U+E000..U+FFFF).
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")


def _is_fast(value: Any) -> bool:
    """True when the C encoder writes `value` exactly as RFC 8785 does. Allocates nothing."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return _MIN_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if kind is float:
        # The C encoder writes repr(): the shortest round-trip digits, as ECMAScript does, in fixed
        # notation for 1e-4 <= |x| < 1e16, where ECMAScript's is fixed too (1e-6 .. 1e21). Whole
        # floats (repr "5.0", RFC 8785 "5"), NaN and everything with an exponent take the library.
        return 1e-4 <= abs(value) < 1e16 and not value.is_integer()
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not _is_fast(item):
                return False
            if not key.isascii() and _ASTRAL.search(key):
                return False
        return True
    if kind is list:
        for item in value:
            if not _is_fast(item):
                return False
        return True
    return False


def normalise(value: Any) -> Any:
    """Plain JSON types (lists, str keys, exact int/float/bool), whole floats within +-2**53 as
    ints (the toolrunner hands tools this: `3`, not the `3.0` a Struct carries); numbers with no
    exact JSON form refused. The canonical bytes are the same either way."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)  # the text itself, not a subclass's __str__ (an Enum's name)
    if isinstance(value, int):
        if not _MIN_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            raise ValueError(f"integer {value} is beyond +-(2**53 - 1): no exact JSON number (RFC 8785)")
        return int(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("non-finite number")
        return int(value) if value.is_integer() and abs(value) < 2**53 else float(value)
    if isinstance(value, dict):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def dumps(value: Any) -> bytes:
    """RFC 8785 bytes of `value`. ValueError for numbers with no canonical form (and lone
    surrogates), TypeError for what is not JSON."""
    if _is_fast(value):
        return _encode(value).encode()
    try:
        return rfc8785.dumps(normalise(value))
    except rfc8785.CanonicalizationError as exc:  # lone surrogates
        raise ValueError(str(exc)) from exc


def dumps_text(value: Any) -> str:
    if _is_fast(value):
        return _encode(value)
    return dumps(value).decode()


def sha256_hex(value: Any) -> str:
    return hashlib.sha256(dumps(value)).hexdigest()
