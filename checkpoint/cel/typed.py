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
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from google.protobuf import descriptor_pb2, descriptor_pool, struct_pb2, timestamp_pb2

from checkpoint.cel.api import CelCompileError, CelType

try:
    from cel_expr_python import cel as _cel
except ImportError:  # pragma: no cover - exercised only where the wheel is missing
    _cel = None

AVAILABLE = _cel is not None

PACKAGE = "warden.cel.typed"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# CEL reserved words cannot be selected (`args.in` does not parse), so they cannot be fields.
RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace "
    "return var void while".split()
)
# What a misspelt function is compared with: CEL's standard functions, macros and methods.
FUNCTIONS = (
    "size", "contains", "startsWith", "endsWith", "matches", "has", "all", "exists", "exists_one", "map",
    "filter", "int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "duration", "timestamp",
    "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek", "getHours",
    "getMinutes", "getSeconds", "getMilliseconds",
)
_OPERATORS = {
    "_==_": "==", "_!=_": "!=", "_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">=", "_+_": "+", "_-_": "-",
    "_*_": "*", "_/_": "/", "_%_": "%", "-_": "unary -", "!_": "!", "_&&_": "&&", "_||_": "||",
    "_?_:_": "?:", "_[_]": "[]", "@in": "in",
}


@dataclass(frozen=True)
class Obj:
    """An object with known fields. `name` is an identifier naming its message; `label` is how
    messages call it ("tool", "args"); `hint` says where its fields come from, after an
    unknown-field message (": not a property of propose_refund's input_schema")."""

    name: str
    label: str
    fields: tuple[tuple[str, Shape], ...]
    hint: str = field(default="", compare=False)

    def field_names(self) -> list[str]:
        return [name for name, _ in self.fields]


@dataclass(frozen=True)
class ListOf:
    """A list whose items are objects (or one scalar type)."""

    item: Obj | CelType


Shape = CelType | Obj | ListOf


class Problem(NamedTuple):
    """One thing wrong with an expression: where (1-based line and column in the source, and
    how many characters to underline) and what, in words for the person who wrote it."""

    line: int
    column: int
    length: int
    message: str


class TypedCompileError(CelCompileError):
    """The expression does not check against the typed declarations; `problems` lists each."""

    def __init__(self, problems: list[Problem], source: str) -> None:
        first = problems[0]
        super().__init__("; ".join(f"{p.line}:{p.column}: {p.message}" for p in problems),
                         line=first.line, column=first.column, source=source)
        self.problems = problems


def frame(source: str, line: int, column: int, length: int = 1, indent: str = "    ") -> str:
    """The source line `line` and a caret under `column` (1-based): a code frame."""
    lines = source.splitlines() or [""]
    text = lines[min(max(line, 1), len(lines)) - 1]
    col = min(max(column, 1), len(text) + 1)
    mark = "^" + "~" * max(min(length, len(text) - col + 1) - 1, 0)
    return f"{indent}| {text}\n{indent}| {' ' * (col - 1)}{mark}"


def suggest(word: str, known: list[str] | tuple[str, ...]) -> str:
    """` (did you mean 'x'?)` for the nearest known word, or ""."""
    import difflib  # only a policy with a mistake needs it: not imported by every load

    near = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    if not near:
        lowered = {k.lower(): k for k in known}
        near = [lowered[word.lower()]] if word.lower() in lowered else []
    return f" (did you mean {near[0]!r}?)" if near else ""


# -- building the checker's declarations --------------------------------------------------


_F = descriptor_pb2.FieldDescriptorProto
_SCALARS: dict[CelType, tuple[int, str]] = {
    CelType.BOOL: (_F.TYPE_BOOL, ""),
    CelType.INT: (_F.TYPE_INT64, ""),
    CelType.UINT: (_F.TYPE_UINT64, ""),
    CelType.DOUBLE: (_F.TYPE_DOUBLE, ""),
    CelType.STRING: (_F.TYPE_STRING, ""),
    CelType.BYTES: (_F.TYPE_BYTES, ""),
    CelType.DYN: (_F.TYPE_MESSAGE, ".google.protobuf.Value"),
    CelType.LIST_DYN: (_F.TYPE_MESSAGE, ".google.protobuf.ListValue"),
    CelType.MAP_STRING_DYN: (_F.TYPE_MESSAGE, ".google.protobuf.Struct"),
    CelType.TIMESTAMP: (_F.TYPE_MESSAGE, ".google.protobuf.Timestamp"),
}


def json_name(name: str) -> str:
    """protobuf's default JSON name of a field (`foo_bar` -> `fooBar`)."""
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def selectable(names: list[str]) -> str | None:
    """Why these names cannot all be fields of one typed object, or None when they can: each must
    be an identifier that is not reserved in CEL, and protobuf refuses two fields whose JSON names
    collide (`foo_bar`, `fooBar`)."""
    seen: dict[str, str] = {}
    for name in names:
        if not _IDENT.match(name) or name in RESERVED:
            return f"{name!r} cannot be read as a field (not a CEL identifier)"
        other = seen.setdefault(json_name(name), name)
        if other != name:
            return f"{other!r} and {name!r} cannot both be fields of one typed object"
    return None


class _Declarations:
    """The messages of one declaration set, in one descriptor pool."""

    def __init__(self, variables: Mapping[str, Shape]) -> None:
        self.objects: dict[Obj, str] = {}  # Obj -> message full name
        self.labels: dict[str, Obj] = {}  # message full name -> Obj
        file = descriptor_pb2.FileDescriptorProto(name="warden_cel_typed.proto", package=PACKAGE, syntax="proto3")
        file.dependency.extend(["google/protobuf/struct.proto", "google/protobuf/timestamp.proto"])
        self.file = file
        for shape in variables.values():
            self._walk(shape)
        self.pool = descriptor_pool.DescriptorPool()
        self.pool.AddSerializedFile(struct_pb2.DESCRIPTOR.serialized_pb)
        self.pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
        self.pool.AddSerializedFile(file.SerializeToString())

    def _walk(self, shape: Shape) -> None:
        if isinstance(shape, ListOf):
            self._walk(shape.item)
        elif isinstance(shape, Obj) and shape not in self.objects:
            problem = selectable(shape.field_names())
            if problem is not None:
                raise ValueError(f"{shape.label}: {problem}")
            full = f"{PACKAGE}.{shape.name}_{len(self.objects)}"
            self.objects[shape] = full
            self.labels[full] = shape
            message = self.file.message_type.add(name=full.rsplit(".", 1)[1])
            for number, (name, ftype) in enumerate(shape.fields, start=1):
                self._walk(ftype)
                self._field(message, name, number, ftype)

    def _field(self, message: Any, name: str, number: int, shape: Shape) -> None:
        label = _F.LABEL_OPTIONAL
        if isinstance(shape, ListOf) or shape is CelType.LIST_STRING:
            label = _F.LABEL_REPEATED
            shape = CelType.STRING if shape is CelType.LIST_STRING else shape.item  # type: ignore[union-attr]
        if isinstance(shape, Obj):
            kind, type_name = _F.TYPE_MESSAGE, "." + self.objects[shape]
        elif shape in _SCALARS:
            kind, type_name = _SCALARS[shape]
        else:  # map(string, string) and other rarities: checked as dyn
            kind, type_name = _SCALARS[CelType.DYN]
        added = message.field.add(name=name, number=number, label=label, type=kind)
        if type_name:
            added.type_name = type_name

    def native_type(self, shape: Shape) -> Any:
        T = _cel.Type
        if isinstance(shape, Obj):
            return T(self.objects[shape])
        if isinstance(shape, ListOf):
            return T.List(self.native_type(shape.item))
        from checkpoint.cel.native import _native_type

        return _native_type(shape)


class Checker:
    """Checks expressions against one set of typed declarations (one native Env)."""

    def __init__(self, variables: Mapping[str, Shape]) -> None:
        if _cel is None:
            raise RuntimeError("cel-expr-python is not installed: typed checking needs its type checker")
        self.variables = dict(variables)
        self._decls = _Declarations(variables)
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
        return _shape_name(shape)

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
            column = _locate(here, name, column)
            if obj is None:
                return Problem(line, column, len(name), self._readable(raw))
            fields = obj.field_names()
            near = suggest(name, fields)
            known = f"; its fields: {', '.join(fields) or '(none)'}" if not near else ""
            return Problem(line, column, len(name), f"{obj.label} has no field {name!r}{obj.hint}{near}{known}")
        if m := self._UNDECLARED.search(raw):
            name = m.group(1).split(".")[0]
            column = _locate(here, name, column)
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


def _shape_name(shape: Shape) -> str:
    if isinstance(shape, Obj):
        return f"an object ({shape.label})"
    if isinstance(shape, ListOf):
        return f"a list of {_shape_name(shape.item)}"
    return shape.value


# `now.getHours("Europe/Berlin")`: a time zone written as a literal is checked at load, so a
# misspelt zone is an error with a suggestion rather than a policy_error on every call.
_ZONE_ARGUMENT = re.compile(
    r"\.(getFullYear|getMonth|getDayOfYear|getDayOfMonth|getDate|getDayOfWeek|getHours|getMinutes|getSeconds"
    r"|getMilliseconds)\(\s*(?:\"([^\"\\]*)\"|'([^'\\]*)')\s*\)")
_zones_ok: dict[str, bool] = {}


def time_zone_problems(source: str) -> list[Problem]:
    """Time zone literals neither engine could use (each engine is asked once per zone)."""
    out = []
    for line_no, text in enumerate(source.splitlines() or [""], start=1):
        for m in _ZONE_ARGUMENT.finditer(text):
            zone = m.group(2) if m.group(2) is not None else m.group(3)
            if not _zone_ok(zone):
                import zoneinfo

                near = suggest(zone, sorted(zoneinfo.available_timezones()))
                column = m.start(2 if m.group(2) is not None else 3)
                out.append(Problem(line_no, column + 1, max(len(zone), 1),
                                   f"unknown time zone {zone!r}{near}; write an IANA name such as "
                                   f"'Europe/Berlin', or an offset such as '+02:00'"))
    return out


def _zone_ok(zone: str) -> bool:
    found = _zones_ok.get(zone)
    if found is None:
        from checkpoint.cel import get_engine

        probe = f"timestamp('2000-01-01T00:00:00Z').getHours({zone!r})"
        found = True
        for name in ("native", "python"):
            try:
                found = found and get_engine(name).compile(probe, {}).evaluate({}).error is None
            except Exception:  # noqa: BLE001 - an engine that cannot even compile the probe refuses it
                found = False
        _zones_ok[zone] = found
    return found


def _locate(text: str, name: str, column: int) -> int:
    """The 1-based column of the whole-word occurrence of `name` in `text` nearest `column`."""
    spots = [m.start() + 1 for m in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)]
    return min(spots, key=lambda s: (abs(s - column), s)) if spots else column


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
