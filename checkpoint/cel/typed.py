"""Typed declarations for CEL variables, checked at load by Google's type checker.

The engines evaluate policy variables as plain maps (`CelType.MAP_STRING_DYN`): cheap to build
per request, and the same in both engines. A map of `dyn` says nothing about its keys, though,
so `tool.acess` or `args.service > 5` would compile and then fail on every request. Here a
variable can instead be declared as an object with known fields (`Obj`), or a list of them
(`ListOf`), and an expression is checked once more against those declarations:

- each `Obj` becomes a protobuf message (built at run time, `descriptor_pb2`), which is how
  cel-expr-python's checker learns fields: an unknown field, a wrong operand type or a result
  of the wrong type is a compile error with line and column;
- the checker's messages are rewritten for a person: the object is named by its label
  ("tool", "args of propose_refund"), operators by their symbols, and a misspelt field,
  variable or function gets a "did you mean" (difflib over what is declared).

Checking only: the program that runs is still compiled by the chosen engine against the map
declarations, so both engines run the same programs and accept the same set of expressions
(the check does not depend on the engine). Messages differ from maps in what the checker
allows: `has(tool.name)` is the way to ask for a field, not `'name' in tool` or `tool['name']`.

Field types: the scalar `CelType`s map to proto scalars (`INT` to int64, `DOUBLE` to double,
...), `DYN` to `google.protobuf.Value`, `LIST_DYN` to `ListValue`, `MAP_STRING_DYN` to `Struct`
and `TIMESTAMP` to `Timestamp`: the well-known types CEL reads as dyn, list(dyn),
map(string, dyn) and timestamp.
The declarations (`declarations`, over the shapes of `shapes`) and the wording of problems
(`problems`) are modules of their own.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping

from checkpoint.cel.declarations import PACKAGE, RESERVED, Declarations, json_name, selectable
from checkpoint.cel.problems import (
    FUNCTIONS,
    Problem,
    TypedCompileError,
    frame,
    locate,
    suggest,
    time_zone_problems,
)
from checkpoint.cel.shapes import ListOf, Obj, Shape, shape_name

try:
    from cel_expr_python import cel as _cel
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _cel = None

AVAILABLE = _cel is not None

__all__ = [
    "AVAILABLE",
    "Checker",
    "FUNCTIONS",
    "ListOf",
    "Obj",
    "PACKAGE",
    "Problem",
    "RESERVED",
    "Shape",
    "TypedCompileError",
    "checker_for",
    "frame",
    "json_name",
    "selectable",
    "suggest",
    "time_zone_problems",
]

_OPERATORS = {
    "_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "_+_": "+", "_-_": "-",
    "_*_": "*", "_/_": "/", "_%_": "%", "-_": "unary -", "!_": "!", "_&&_": "&&", "_||_": "||",
    "_?_:_": "?:", "_[_]": "[]", "@in": "in",
}


class Checker:
    """Checks expressions against one set of typed declarations (one native Env)."""

    def __init__(self, variables: Mapping[str, Shape]) -> None:
        if _cel is None:
            raise RuntimeError("cel-expr-python is not installed: typed checking needs its type checker")
        self.variables = dict(variables)
        self._decls = Declarations(variables)
        self._env = _cel.NewEnv(descriptor_pool=self._decls.pool,
                                variables={k: self._decls.native_type(v) for k, v in variables.items()})

    def check(self, source: str) -> str:
        """The checked result type (`BOOL`, `DYN`, `LIST<STRING>`, an object's label ...);
        raises TypedCompileError naming every problem."""
        try:
            expr = self._env.compile(source)
        except Exception as exc:  # noqa: BLE001 - the binding raises RuntimeError with a status text
            raise TypedCompileError(self._problems(source, str(exc)), source) from exc
        zones = time_zone_problems(source)
        if zones:
            raise TypedCompileError(zones, source)
        return self._readable(str(expr.return_type()))

    def type_of(self, chain: str) -> str | None:
        """The declared type of a field path such as `args.target`, or None when it is not one."""
        names = chain.split(".")
        shape: Shape | None = self.variables.get(names[0])
        for name in names[1:]:
            if not isinstance(shape, Obj):
                return None
            shape = dict(shape.fields).get(name)
        if shape is None or len(names) < 2:
            return None
        return shape_name(shape)

    # -- messages ------------------------------------------------------------------------

    _ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")
    _UNDEFINED = re.compile(r"undefined field '([^']*)' not found in struct '([^']*)'")
    _UNDECLARED = re.compile(r"undeclared reference to '([^']*)'")
    _OVERLOAD = re.compile(r"found no matching overload for '([^']*)' applied to '\((.*)\)'")
    _MESSAGE_NAME = re.compile(re.escape(PACKAGE) + r"\.[A-Za-z0-9_]+")

    def _readable(self, text: str) -> str:
        return self._MESSAGE_NAME.sub(lambda m: self._decls.labels[m.group(0)].label
                                      if m.group(0) in self._decls.labels else m.group(0), text)

    def _problems(self, source: str, text: str) -> list[Problem]:
        found = self._ERROR.findall(text)
        if not found:
            return [Problem(1, 1, 1, text.strip() or "does not compile")]
        lines = source.splitlines() or [""]
        out = []
        for line_text, col_text, raw in found:
            line, column = int(line_text), int(col_text)
            raw = raw.removesuffix(" [INVALID_ARGUMENT]").removesuffix(" (in container '')")
            here = lines[min(line, len(lines)) - 1]
            out.append(self._problem(here, line, column, raw))
        return out

    def _problem(self, here: str, line: int, column: int, raw: str) -> Problem:
        if m := self._UNDEFINED.search(raw):
            name, struct = m.groups()
            obj = self._decls.labels.get(struct)
            column = locate(here, name, column)
            if obj is None:
                return Problem(line, column, len(name), self._readable(raw))
            fields = obj.field_names()
            near = suggest(name, fields)
            known = f"; its fields: {', '.join(fields) or '(none)'}" if not near else ""
            return Problem(line, column, len(name), f"{obj.label} has no field {name!r}{obj.hint}{near}{known}")
        if m := self._UNDECLARED.search(raw):
            name = m.group(1).split(".")[0]
            column = locate(here, name, column)
            after = here[column - 1 + len(name):].lstrip()
            if after.startswith("("):
                return Problem(line, column, len(name), f"unknown function {name!r}{suggest(name, FUNCTIONS)}")
            near = suggest(name, sorted(self.variables))
            return Problem(line, column, len(name),
                           f"unknown variable {name!r}{near}; rules read: {', '.join(sorted(self.variables))}")
        if m := self._OVERLOAD.search(raw):
            function, operands = m.group(1), self._readable(m.group(2))
            op = _OPERATORS.get(function)
            if function in _BINARY:
                said = self._operands(here, column)
                if said:
                    return Problem(line, column, 1, f"{op!r} does not apply to ({operands}): {said}"
                                   f"{self._hint(function, operands)}")
            if op is None:
                near = "" if function in FUNCTIONS else suggest(function, FUNCTIONS)
                return Problem(line, column, 1,
                               f"{function!r} does not apply to ({operands}){near}{self._hint(function, operands)}")
            return Problem(line, column, 1, f"{op!r} does not apply to ({operands}){self._hint(function, operands)}")
        return Problem(line, column, 1, self._readable(raw))

    def _operands(self, here: str, column: int) -> str:
        """"args.target is string" for the field paths either side of the operator at `column`."""
        left = re.search(r"([A-Za-z_][A-Za-z0-9_.]*)\s*$", here[:column - 1])
        right = re.match(r"\s*(?:[=!<>]=|[<>+*/%-]|in(?![A-Za-z0-9_]))\s*([A-Za-z_][A-Za-z0-9_.]*)", here[column - 1:])
        said = []
        for m in (left, right):
            kind = self.type_of(m.group(1)) if m else None
            if m and kind:
                said.append(f"{m.group(1)} is {kind}")
        return ", ".join(dict.fromkeys(said))

    def _hint(self, function: str, operands: str) -> str:
        kinds = {part.strip() for part in operands.split(",")}
        if {"int", "double"} <= kinds:
            return ": write the number with the other's type (500.0 for a double, 500 for an int), " \
                   "or convert one side with double() or int()"
        objects = {obj.label for obj in self._decls.labels.values()}
        typed = sorted(kinds & objects)
        if typed and function in ("@in", "_[_]", "size"):
            return f": {typed[0]} is an object with known fields, not a map: ask for a field with has({typed[0]}.field)"
        return ""


_BINARY = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "_+_", "_-_", "_*_", "_/_", "_%_", "@in"})
_checkers: OrderedDict[tuple[tuple[str, Shape], ...], Checker] = OrderedDict()
_lock = threading.Lock()
_KEEP = 256  # declaration sets kept built: one per distinct set of tools a rule names, per load


def checker_for(variables: Mapping[str, Shape]) -> Checker:
    """A shared Checker for these declarations (built once: a descriptor pool and an Env)."""
    key = tuple(sorted(variables.items(), key=lambda kv: kv[0]))
    with _lock:
        found = _checkers.get(key)
        if found is not None:
            _checkers.move_to_end(key)
            return found
    built = Checker(dict(key))
    with _lock:
        _checkers[key] = built
        while len(_checkers) > _KEEP:
            _checkers.popitem(last=False)
    return built
