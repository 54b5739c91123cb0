"""CEL behind one small interface, with two backends.

`get_engine("native")` (default) uses Google's C++ runtime; `get_engine("python")` uses
cel-python with operator overrides so both give the same answers (see docs/cel.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint.cel.api import CelCompileError, CelEngine, CelProgram, CelResult, CelType
from checkpoint.cel.differential import Case, Mismatch, agree
from checkpoint.cel.differential import differential as _differential

ENGINE_NAMES = ("native", "python")

_engines: dict[str, CelEngine] = {}


def get_engine(name: str = "native") -> CelEngine:
    """A shared engine instance by name; unknown names raise ValueError."""
    if name not in ENGINE_NAMES:
        raise ValueError(f"unknown CEL engine {name!r}; expected one of {', '.join(ENGINE_NAMES)}")
    engine = _engines.get(name)
    if engine is None:
        if name == "native":
            from checkpoint.cel.native import NativeEngine

            engine = NativeEngine()
        else:
            from checkpoint.cel.pure import PythonEngine

            engine = PythonEngine()
        _engines[name] = engine
    return engine


def differential(cases: Iterable[Case], left: str = "native", right: str = "python") -> list[Mismatch]:
    """Evaluate every case on two engines; return the cases where they disagree."""
    return _differential(cases, get_engine(left), get_engine(right))


__all__ = [
    "Case",
    "CelCompileError",
    "CelEngine",
    "CelProgram",
    "CelResult",
    "CelType",
    "Mismatch",
    "agree",
    "differential",
    "get_engine",
]
