"""Protobuf Struct values to plain Python and back: the one conversion every process uses.

A Struct carries every number as a double; whole numbers come back as ints, so that
`args.count == 3` in a rule, the canonical hash of a grant and the driver's plain JSON all agree.
Hand-written rather than `json_format.MessageToDict`, which is an order of magnitude slower and
keeps whole numbers as floats.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

MAX_DEPTH = 32


class UnacceptableValue(ValueError):
    """Arguments the checkpoint refuses to reason about: too deep, strings holding NUL, numbers
    that are not finite."""


def struct_to_dict(s: struct_pb2.Struct, *, checked: bool = True, depth: int = 0) -> dict[str, Any]:
    """The Struct as a dict. `checked` refuses what the decision function may not reason about
    (UnacceptableValue); unchecked, those values pass as they are, for a reader that refuses them
    itself at a later step with a code of its own (the toolrunner's grant check)."""
    if checked and depth > MAX_DEPTH:
        raise UnacceptableValue(f"arguments are nested deeper than {MAX_DEPTH} levels")
    out = {}
    fields = s.fields
    for k in fields:  # keys then lookups: the map's items() view goes through a slow generic path
        if checked and "\x00" in k:
            raise UnacceptableValue("argument names may not contain NUL")
        out[k] = value_to_python(fields[k], checked=checked, depth=depth + 1)
    return out


def value_to_python(v: struct_pb2.Value, *, checked: bool = True, depth: int = 0) -> Any:
    kind = v.WhichOneof("kind")
    if kind == "string_value":
        text = v.string_value
        if checked and "\x00" in text:
            # C runtimes (the native CEL engine among them) cut strings at NUL, so a value
            # could be checked as something other than what the tool receives.
            raise UnacceptableValue("argument strings may not contain NUL")
        return text
    if kind == "number_value":
        n = v.number_value
        if n != n or n in (float("inf"), float("-inf")):
            if checked:
                raise UnacceptableValue("arguments hold a number that is not finite (NaN or infinity)")
            return n
        return int(n) if n.is_integer() and abs(n) < 2**53 else n
    if kind == "bool_value":
        return v.bool_value
    if kind == "struct_value":
        return struct_to_dict(v.struct_value, checked=checked, depth=depth)
    if kind == "list_value":
        if checked and depth > MAX_DEPTH:
            raise UnacceptableValue(f"arguments are nested deeper than {MAX_DEPTH} levels")
        return [value_to_python(x, checked=checked, depth=depth + 1) for x in v.list_value.values]
    return None


def to_struct(values: dict[str, Any]) -> struct_pb2.Struct:
    """A dict of plain JSON values as a Struct (numbers become doubles, as the wire carries them)."""
    out = struct_pb2.Struct()
    out.update(values)
    return out
