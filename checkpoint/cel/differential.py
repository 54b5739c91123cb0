"""Run expressions through both engines and report where they disagree."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from checkpoint.cel.api import CelCompileError, CelEngine, CelResult, CelType
from checkpoint.cel.values import same_value


@dataclass(frozen=True)
class Case:
    source: str
    activation: Mapping[str, object]
    variables: Mapping[str, CelType]


@dataclass(frozen=True)
class Mismatch:
    source: str
    activation: Mapping[str, object]
    # Compile errors are rendered as "compile error: ..." so they compare like results.
    left: CelResult | str
    right: CelResult | str

    def __str__(self) -> str:
        return f"{self.source!r}: {self.left!r} != {self.right!r}"


def _run(engine: CelEngine, case: Case) -> CelResult | str:
    try:
        program = engine.compile(case.source, case.variables)
    except CelCompileError as exc:
        return f"compile error: {exc.message}"
    return program.evaluate(case.activation)


def agree(a: CelResult | str, b: CelResult | str) -> bool:
    """Same outcome: both fail to compile, both error at runtime, or equal plain values
    of the same Python type (1 vs 1.0 vs True are different)."""
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str)
    if a.error is not None or b.error is not None:
        return a.error is not None and b.error is not None
    return same_value(a.value, b.value)


def differential(cases: Iterable[Case], left: CelEngine, right: CelEngine) -> list[Mismatch]:
    """Every case on which `left` and `right` disagree; empty means they agree."""
    out = []
    for case in cases:
        a, b = _run(left, case), _run(right, case)
        if not agree(a, b):
            out.append(Mismatch(case.source, case.activation, a, b))
    return out
