"""Plain argument lookups, recognised at compile time and run without a CEL runtime.

Most `touches` expressions only read one argument: `[args.target]`,
`has(args.node) ? [args.node] : []`, `args.hosts`. Running them through a CEL runtime costs a
few microseconds each on every call; these closures give the same results (including the
error for a missing key) in a fraction of that. Anything else compiles through the engine.
A differential test (tests/cel/test_fastpath.py) holds the two to the same answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from checkpoint.cel.api import CelResult

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_SINGLETON = re.compile(rf"^\s*\[\s*args\.({_IDENT})\s*\]\s*$")
_OPTIONAL = re.compile(rf"^\s*has\(\s*args\.({_IDENT})\s*\)\s*\?\s*\[\s*args\.({_IDENT})\s*\]\s*:\s*\[\s*\]\s*$")
_FIELD = re.compile(rf"^\s*args\.({_IDENT})\s*$")
# CEL reserved words cannot be field names in select expressions; leave them to the engine.
_RESERVED = frozenset(
    "true false null in as break const continue else for function if import let loop package namespace "
    "return var void while".split()
)


class FastProgram:
    __slots__ = ("source", "_run")

    def __init__(self, source: str, run: Callable[[Mapping[str, Any]], CelResult]):
        self.source = source
        self._run = run

    def evaluate(self, activation: Mapping[str, Any]) -> CelResult:
        args = activation.get("args")
        if type(args) is not dict:
            return CelResult(error="activation is missing declared variable 'args'")
        return self._run(args)


def _missing(name: str) -> CelResult:
    return CelResult(error=f"no such key: {name}")


def compile_fast(source: str) -> FastProgram | None:
    """A FastProgram for the recognised shapes over `args`, or None."""
    if m := _SINGLETON.match(source):
        name = m.group(1)
        return None if name in _RESERVED else FastProgram(
            source, lambda args: CelResult([args[name]]) if name in args else _missing(name)
        )
    if m := _OPTIONAL.match(source):
        name, again = m.groups()
        if name != again or name in _RESERVED:
            return None
        return FastProgram(source, lambda args: CelResult([args[name]] if name in args else []))
    if m := _FIELD.match(source):
        name = m.group(1)
        return None if name in _RESERVED else FastProgram(
            source, lambda args: CelResult(args[name]) if name in args else _missing(name)
        )
    return None
