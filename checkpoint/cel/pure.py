"""Backend on cel-python (`celpy`, pure Python): the fallback and the differential oracle."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Mapping
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
from celpy.evaluation import CELEvalError, Evaluator, base_functions

from checkpoint.cel import native
from checkpoint.cel.api import FALSE, TRUE, CelCompileError, CelResult, CelType
from checkpoint.cel.pure_semantics import OVERRIDES, logical_and, logical_or
from checkpoint.cel.values import INT64_MAX, INT64_MIN, missing_variable, normalise

# cel-python logs every evaluation error at WARNING; errors are results here, not incidents.
logging.getLogger("celpy").setLevel(logging.ERROR)

_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_FUNCTIONS = frozenset(base_functions) | frozenset(OVERRIDES) | {"has"}
# Type names are identifiers in CEL (`type(x) == int`).
_TYPE_NAMES = frozenset({"int", "uint", "double", "bool", "string", "bytes", "list", "map",
                         "null_type", "type"})


class _ActivationError(Exception):
    pass


def _to_cel(value: object, where: str) -> Any:
    """JSON-shaped Python -> cel-python values, rejecting what the native runtime rejects."""
    if value is None:
        return None
    if isinstance(value, bool):
        return ct.BoolType(value)
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise _ActivationError(f"integer out of int64 range at {where}")
        return ct.IntType(value)
    if isinstance(value, float):
        return ct.DoubleType(value)
    if isinstance(value, str):
        return ct.StringType(value)
    if isinstance(value, bytes):
        return ct.BytesType(value)
    if isinstance(value, list):
        return ct.ListType([_to_cel(v, f"{where}[{i}]") for i, v in enumerate(value)])
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise _ActivationError(f"map key of type {type(k).__name__} at {where}")
            out[_to_cel(k, where)] = _to_cel(v, f"{where}[{k!r}]")
        return ct.MapType(out)
    raise _ActivationError(f"unsupported value type {type(value).__name__} at {where}")


def _convert_top(name: str, declared: CelType, value: object) -> Any:
    """Enforce the declared type of a top-level variable the way the native runtime does."""
    def bad() -> _ActivationError:
        return _ActivationError(f"variable '{name}' must be {declared.value}, got {type(value).__name__}")

    if declared is CelType.DYN:
        return _to_cel(value, name)
    if declared is CelType.TIMESTAMP:
        # As the native runtime reads it: an aware datetime is that instant, a naive one is
        # local time (Python's convention); nothing else is a timestamp.
        if not isinstance(value, datetime.datetime):
            raise bad()
        return ct.TimestampType(value.astimezone(datetime.UTC))
    if declared is CelType.DOUBLE:
        # The native runtime widens an int bound to a double variable; so do we.
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return ct.DoubleType(float(value))
        raise bad()
    simple = {CelType.BOOL: bool, CelType.STRING: str, CelType.BYTES: bytes}
    if declared in simple:
        if not isinstance(value, simple[declared]):
            raise bad()
        return _to_cel(value, name)
    if declared in (CelType.INT, CelType.UINT):
        if not isinstance(value, int) or isinstance(value, bool):
            raise bad()
        if declared is CelType.UINT:
            if not 0 <= value < 2**64:
                raise bad()
            return ct.UintType(value)
        return _to_cel(value, name)
    if declared in (CelType.LIST_DYN, CelType.LIST_STRING):
        if not isinstance(value, list):
            raise bad()
        if declared is CelType.LIST_STRING and not all(isinstance(v, str) for v in value):
            raise bad()
        return _to_cel(value, name)
    if declared in (CelType.MAP_STRING_DYN, CelType.MAP_STRING_STRING):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise bad()
        if declared is CelType.MAP_STRING_STRING and not all(isinstance(v, str) for v in value.values()):
            raise bad()
        return _to_cel(value, name)
    raise bad()  # pragma: no cover - every CelType is handled above


def _bound_name(expr: lark.Tree) -> str | None:
    """The identifier an expression consists of, if it is a bare identifier (macro binder)."""
    node: lark.Tree | lark.Token = expr
    while isinstance(node, lark.Tree):
        if node.data == "ident":
            return str(node.children[0])
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


def _check_names(tree: lark.Tree, declared: frozenset[str], source: str) -> set[str]:
    """Reject undeclared variables and unknown functions at compile time; return the
    declared variables the expression reads.

    cel-python has no checker; without this, `rn.mode` would compile and only fail (as an
    error, so closed) on every request instead of at policy load.
    """
    used: set[str] = set()

    def walk(node: lark.Tree | lark.Token, bound: frozenset[str]) -> None:
        if not isinstance(node, lark.Tree):
            return
        if node.data in ("ident", "dot_ident"):
            name = str(node.children[0])
            if name in bound:
                return
            if name in declared:
                used.add(name)
            elif name not in _TYPE_NAMES:
                raise _name_error(node, f"undeclared reference to '{name}'", source)
            return
        if node.data in ("ident_arg", "dot_ident_arg"):
            name = str(node.children[0])
            if name not in _FUNCTIONS:
                raise _name_error(node, f"undeclared reference to function '{name}'", source)
            for child in node.children[1:]:
                walk(child, bound)
            return
        if node.data == "member_dot_arg":
            target, method, *rest = node.children
            walk(target, bound)
            name = str(method)
            args = rest[0].children if rest and isinstance(rest[0], lark.Tree) else []
            if name in _MACROS and len(args) >= 2:
                var = _bound_name(args[0])
                if var is None:
                    raise _name_error(node, f"macro '{name}' needs a variable name first", source)
                for arg in args[1:]:
                    walk(arg, bound | {var})
                return
            if name not in _FUNCTIONS:
                raise _name_error(node, f"undeclared reference to function '{name}'", source)
            for arg in args:
                walk(arg, bound)
            return
        for child in node.children:
            walk(child, bound)

    walk(tree, frozenset())
    return used


def _name_error(node: lark.Tree, message: str, source: str) -> CelCompileError:
    line = getattr(node.meta, "line", None)
    column = getattr(node.meta, "column", None)
    where = f"{line}:{column}: " if line is not None else ""
    return CelCompileError(f"{where}{message}", line=line, column=column, source=source)


def _select(exprlist: lark.Tree) -> lark.Tree | None:
    """The `e.f` node a has() argument consists of, if it is one."""
    node: lark.Tree | lark.Token = exprlist.children[0] if exprlist.children else exprlist
    while isinstance(node, lark.Tree):
        if node.data == "member_dot":
            return node
        if len(node.children) != 1:
            return None
        node = node.children[0]
    return None


_BOOL_MACROS = frozenset({"all", "exists", "exists_one", "filter"})


def _value(sub: Callable[[Any], Any], member: Any) -> Any:
    try:
        return sub(member)
    except CELEvalError as exc:
        return exc


class _Evaluator(Evaluator):
    """cel-python's evaluator where it is more lenient than the native runtime (and CEL), which
    would let a rule pass under one engine that the other refuses."""

    def member_dot_arg(self, tree: lark.Tree) -> Any:
        # a macro over a string iterates its characters here; CEL has no such overload
        name = str(tree.children[1])
        if name not in _MACROS:
            return super().member_dot_arg(tree)
        member = tree.children[0]
        target = self.visit(member)
        if not isinstance(target, (CELEvalError, list, dict)):
            return CELEvalError(f"no such overload: {name}() over {type(target).__name__}", TypeError, ())
        if name in _BOOL_MACROS and not isinstance(target, CELEvalError):
            return self._bool_macro(name, tree, list(target))  # a map's keys
        # cel-python visits the target again; hand it the value just computed, or each macro of
        # a chain (`l.map(..).map(..)`) would evaluate the ones before it twice: exponential
        saved = self.__dict__.get("visit")
        visit = self.visit

        def once(node: Any) -> Any:
            return target if node is member else visit(node)

        self.visit = once  # type: ignore[method-assign,assignment]
        try:
            return super().member_dot_arg(tree)
        finally:
            if saved is None:
                del self.visit
            else:
                self.visit = saved  # type: ignore[method-assign]

    def _bool_macro(self, name: str, tree: lark.Tree, members: list[Any]) -> Any:
        """all, exists, exists_one and filter over a predicate that must give a bool: cel-python
        folds `all`/`exists` with a lenient `||`/`&&` and counts any truthy value (an error, a
        string) for `exists_one` and `filter`, where the native runtime gives an error."""
        if name in ("all", "exists"):
            fold = logical_or if name == "exists" else logical_and
            sub = self.build_ss_macro_eval(tree)
            result: Any = ct.BoolType(name == "all")
            for member in members:  # commutative: a later absorbing value wins over an error
                try:
                    result = fold(result, _value(sub, member))
                except TypeError as exc:
                    result = CELEvalError(str(exc), TypeError, ())
            return result
        sub = self.build_macro_eval(tree)
        values = [_value(sub, member) for member in members]
        for value in values:
            if isinstance(value, CELEvalError):
                return value
            if not isinstance(value, (bool, ct.BoolType)):
                return CELEvalError(f"no such overload: {name}() over a predicate that gave "
                                    f"{type(value).__name__}, not a bool", TypeError, ())
        if name == "filter":
            return ct.ListType(m for m, v in zip(members, values, strict=True) if v)
        return ct.BoolType(sum(1 for v in values if v) == 1)

    def macro_has_eval(self, exprlist: lark.Tree) -> Any:
        # has(e.f) is false here whenever e.f fails, e missing or not a map included; in CEL it
        # tests only whether map e holds f, and an e that fails or is no map is an error
        select = _select(exprlist)
        if select is None:
            return super().macro_has_eval(exprlist)
        target = self.visit(select.children[0])
        if isinstance(target, CELEvalError):
            return target
        if not isinstance(target, dict):
            return CELEvalError(f"no such overload: has() on {type(target).__name__}", TypeError, ())
        return ct.BoolType(ct.StringType(str(select.children[1])) in target)


class _Runner(celpy.InterpretedRunner):
    def evaluate(self, context: Any) -> Any:
        return _Evaluator(ast=self.ast, activation=self.new_activation()).evaluate(context)


class PythonProgram:
    __slots__ = ("source", "_runner", "_variables", "_names")

    def __init__(self, source: str, runner: celpy.Runner, variables: Mapping[str, CelType],
                 used: set[str]) -> None:
        self.source = source
        self._runner = runner
        # Only variables the expression reads are converted: conversion is a deep walk.
        # Every declared one must still be present (same rule as the native engine).
        self._variables = tuple((n, t) for n, t in variables.items() if n in used)
        self._names = tuple(variables)

    def evaluate(self, activation: Mapping[str, object]) -> CelResult:
        missing = missing_variable(activation, self._names)
        if missing is not None:
            return CelResult(error=missing)
        try:
            context: dict[str, Any] = {name: _convert_top(name, t, activation[name]) for name, t in self._variables}
        except _ActivationError as exc:
            return CelResult(error=f"invalid activation: {exc}")
        try:
            value = self._runner.evaluate(context)
        except CELEvalError as exc:
            return CelResult(error=str(exc.args[0]) if exc.args else "evaluation error")
        except Exception as exc:  # noqa: BLE001 - any interpreter failure must fail closed
            return CelResult(error=f"evaluation failed: {type(exc).__name__}: {exc}")
        if isinstance(value, CELEvalError):
            return CelResult(error=str(value.args[0]) if value.args else "evaluation error")
        plain = normalise(value)
        if plain is True:
            return TRUE
        if plain is False:
            return FALSE
        return CelResult(value=plain)

    def __repr__(self) -> str:
        return f"PythonProgram({self.source!r})"


class PythonEngine:
    """cel-python with native-compatible operator semantics.

    `full_check`: also run the native type-checker when it is installed, so both engines
    reject exactly the same expressions at load (e.g. `1 + 'a'`, `3 == 3.0`). Without the
    native wheel, compile checks syntax, variable names and function names only, and type
    errors surface as evaluation errors (still failing closed).
    """

    name = "python"

    def __init__(self, full_check: bool = True) -> None:
        # The default InterpretedRunner: CompiledRunner crashes in cel-python 0.5.0.
        self._env = celpy.Environment(runner_class=_Runner)
        self._checker = native.NativeEngine() if full_check and native.AVAILABLE else None

    def preparer(self, variables: Mapping[str, CelType]) -> Callable[[Mapping[str, object]], Mapping[str, object]]:
        """cel-python converts per evaluation; preparing is the identity here."""
        return lambda data: data

    def compile(self, source: str, variables: Mapping[str, CelType]) -> PythonProgram:
        try:
            tree = self._env.compile(source)
        except celpy.CELParseError as exc:
            line, column = exc.line, exc.column
            first = str(exc.args[0]).splitlines()[0] if exc.args else "syntax error"
            where = f"{line}:{column}: " if line is not None else ""
            raise CelCompileError(f"{where}syntax error: {first}", line=line, column=column,
                                  source=source) from exc
        used = _check_names(tree, frozenset(variables), source)
        if self._checker is not None:
            self._checker.check(source, variables)
        runner = self._env.program(tree, functions=OVERRIDES)
        return PythonProgram(source, runner, variables, used)
