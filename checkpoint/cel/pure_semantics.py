"""Operator overrides that make cel-python follow the semantics the native runtime has.

cel-python 0.5.0 predates CEL's heterogeneous-number rules: `dyn(3) == 3.0` is an error
there, `double > int` works but `int > double` does not, and `double + int` quietly returns a
Python float. The native runtime (and the current CEL spec) compares int, uint and double by
numeric value at runtime, treats values of different kinds as unequal (not an error), and
never mixes kinds in arithmetic. These functions are passed to cel-python's `program()` and
take precedence over its built-ins; the differential test keeps the two honest.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import celpy.celtypes as ct
from celpy.evaluation import CELEvalError, base_functions

_NUMBER_KINDS = (ct.IntType, ct.UintType, ct.DoubleType)


def _kind(v: object) -> str:
    # BoolType subclasses int (not bool), so test it first; plain Python values can appear too
    # because some cel-python operators return them unwrapped.
    if isinstance(v, (bool, ct.BoolType)):
        return "bool"
    if isinstance(v, ct.UintType):
        return "uint"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bytes):
        return "bytes"
    if v is None:
        return "null"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, _Conversion):
        return "type"
    return type(v).__name__


def _is_number(v: object) -> bool:
    return _kind(v) in ("int", "uint", "double")


def _num(v: object) -> int | float:
    # Unwrap: cel-python's IntType/DoubleType raise TypeError when compared with each other.
    return float(v) if isinstance(v, float) else int(v)  # type: ignore[call-overload]


def _eq(a: object, b: object) -> bool:
    ka, kb = _kind(a), _kind(b)
    if ka in ("int", "uint", "double") and kb in ("int", "uint", "double"):
        # Python compares int with float exactly (no rounding through float).
        return _num(a) == _num(b)
    if ka != kb:
        return False
    if ka == "list":
        assert isinstance(a, list) and isinstance(b, list)
        return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b, strict=True))
    if ka == "map":
        assert isinstance(a, dict) and isinstance(b, dict)
        if len(a) != len(b):
            return False
        for key, value in a.items():
            found = _lookup(b, key)
            if found is _MISSING or not _eq(value, found):
                return False
        return True
    return a == b  # type: ignore[no-any-return]


_MISSING = object()


def _lookup(mapping: dict, key: object) -> object:
    if isinstance(key, str):
        # Strings only equal strings, so the hash lookup is exact.
        return mapping.get(key, _MISSING)
    # Numbers match across int/uint/double by value; bools must not match 1 (Python would).
    for k, v in mapping.items():
        if _eq(k, key):
            return v
    return _MISSING


def _guard(fn: Callable[[object, object], object]) -> Callable[[object, object], object]:
    def wrapped(a: object, b: object) -> object:
        if isinstance(a, CELEvalError):
            return a
        if isinstance(b, CELEvalError):
            return b
        return fn(a, b)

    wrapped.__name__ = fn.__name__
    return wrapped


def _eq_fn(a: object, b: object) -> object:
    return ct.BoolType(_eq(a, b))


def _ne_fn(a: object, b: object) -> object:
    return ct.BoolType(not _eq(a, b))


_ORDERED = ("string", "bytes", "bool", "Timestamp", "TimestampType", "DurationType")


def _order(op: Callable[[Any, Any], Any]) -> Callable[[object, object], object]:
    def compare(a: object, b: object) -> object:
        if _is_number(a) and _is_number(b):
            return ct.BoolType(op(_num(a), _num(b)))
        ka, kb = _kind(a), _kind(b)
        if ka == kb and ka in _ORDERED:
            return ct.BoolType(op(a, b))
        # cel-python turns TypeError into a CEL "no matching overload" error value.
        raise TypeError(f"no such overload: {ka} {op.__name__} {kb}")

    compare.__name__ = op.__name__
    return compare


def _arith(op: Callable[[object, object], object], name: str) -> Callable[[object, object], object]:
    base = base_functions[name]

    def apply(a: object, b: object) -> object:
        if _is_number(a) and _is_number(b) and _kind(a) != _kind(b):
            raise TypeError(f"no such overload: {_kind(a)} {name} {_kind(b)}")
        if "bool" in (_kind(a), _kind(b)):  # BoolType is a Python int: `true + 1` would be 2
            raise TypeError(f"no such overload: {_kind(a)} {name} {_kind(b)}")
        return base(a, b)

    apply.__name__ = op.__name__
    return apply


def _in(item: object, container: object) -> object:
    if isinstance(container, dict):
        return ct.BoolType(_lookup(container, item) is not _MISSING)
    if isinstance(container, list):
        return ct.BoolType(any(_eq(item, x) for x in container))
    raise TypeError(f"no such overload: {_kind(item)} in {_kind(container)}")


def _index(container: object, key: object) -> object:
    if isinstance(container, dict):
        found = _lookup(container, key)
        if found is _MISSING:
            raise KeyError(f"no such key: {key!r}")
        return found
    if isinstance(container, list):
        if _kind(key) == "double":
            assert isinstance(key, float)
            if not key.is_integer():
                raise TypeError("list index must be an integer")
            key = int(key)
        if _kind(key) not in ("int", "uint"):
            raise TypeError(f"no such overload: list[{_kind(key)}]")
        assert isinstance(key, int)
        if not 0 <= key < len(container):
            raise IndexError(f"index {key} out of range for list of size {len(container)}")
        return container[key]
    # Strings are not indexable in CEL, though they are in Python.
    raise TypeError(f"no such overload: {_kind(container)}[{_kind(key)}]")


def _dyn(value: object) -> object:
    return value


def _negate(value: object) -> object:
    if not _is_number(value):  # `-true` would be -1 in Python
        raise TypeError(f"no such overload: -{_kind(value)}")
    return base_functions["-_"](value)


class _Conversion:
    """cel-python's `name()` refusing the kinds the native runtime has no overload for (it reads
    null as 0, "" or false: `int(null) == 0`, `size(null) == 0`). The name is also a type
    (`type(x) == int`): the conversion stands for its type there."""

    def __init__(self, name: str, refused: tuple[str, ...]) -> None:
        self.name, self.base, self.refused = name, base_functions[name], refused
        self.__name__ = name

    def __call__(self, *values: object) -> object:
        if values and _kind(values[0]) in self.refused:
            raise TypeError(f"no such overload: {self.name}({_kind(values[0])})")
        if self.name == "string" and values and _kind(values[0]) == "bool":
            return ct.StringType("true" if values[0] else "false")  # Python's str() says "True"
        return self.base(*values)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.base or (isinstance(other, _Conversion) and other.base is self.base)

    def __hash__(self) -> int:
        return hash(self.base)


def _logic(absorbing: bool) -> Callable[[Any, Any], Any]:
    """`||` (`absorbing` true) and `&&` (false) as the native runtime has them: commutative over
    errors, and an operand that is no bool is an error, never handed on as the result (cel-python
    gives `false || "yes"` as `"yes"`, so `["yes"].exists(s, s)` was "yes", not an error)."""
    name = "_||_" if absorbing else "_&&_"

    def fn(x: Any, y: Any) -> Any:
        if any(isinstance(v, (bool, ct.BoolType)) and bool(v) is absorbing for v in (x, y)):
            return ct.BoolType(absorbing)
        for v in (x, y):
            if isinstance(v, CELEvalError):
                return v
        if isinstance(x, (bool, ct.BoolType)) and isinstance(y, (bool, ct.BoolType)):
            return ct.BoolType(not absorbing)
        raise TypeError(f"no matching overload for {name} applied to ({_kind(x)}, {_kind(y)})")

    fn.__name__ = name
    return fn


logical_or, logical_and = _logic(True), _logic(False)

OVERRIDES: dict[str, Any] = {
    "_||_": logical_or,
    "_&&_": logical_and,
    "_==_": _guard(_eq_fn),
    "_!=_": _guard(_ne_fn),
    "_<_": _guard(_order(operator.lt)),
    "_<=_": _guard(_order(operator.le)),
    "_>_": _guard(_order(operator.gt)),
    "_>=_": _guard(_order(operator.ge)),
    "_+_": _guard(_arith(operator.add, "_+_")),
    "_-_": _guard(_arith(operator.sub, "_-_")),
    "_*_": _guard(_arith(operator.mul, "_*_")),
    "_/_": _guard(_arith(operator.truediv, "_/_")),
    "_%_": _guard(_arith(operator.mod, "_%_")),
    "_in_": _guard(_in),
    "_[_]": _guard(_index),
    "-_": _negate,
    "int": _Conversion("int", ("null",)),
    "uint": _Conversion("uint", ("null", "bool")),
    "double": _Conversion("double", ("null", "bool")),
    "string": _Conversion("string", ("null", "list", "map")),
    "bool": _Conversion("bool", ("null",)),
    "bytes": _Conversion("bytes", ("null",)),
    "size": _Conversion("size", ("null", "bool")),
    "duration": _Conversion("duration", ("null", "bool", "int", "uint", "double")),
    "dyn": _dyn,
}
