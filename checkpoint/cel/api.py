"""The engine-neutral surface: declared types, results, errors and the two protocols."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import NamedTuple, Protocol


class CelType(enum.Enum):
    """Declared type of a top-level variable.

    Kept deliberately small: policies see JSON-shaped data, plus one timestamp (the
    checkpoint's clock, `now`). Typed objects with known fields are declared for checking
    only (`checkpoint.cel.typed`); evaluation reads them as maps.
    """

    DYN = "dyn"
    BOOL = "bool"
    INT = "int"
    UINT = "uint"
    DOUBLE = "double"
    STRING = "string"
    BYTES = "bytes"
    LIST_DYN = "list(dyn)"
    LIST_STRING = "list(string)"
    MAP_STRING_DYN = "map(string, dyn)"
    MAP_STRING_STRING = "map(string, string)"
    TIMESTAMP = "timestamp"  # an aware datetime.datetime in the activation


class CelCompileError(Exception):
    """Parse or type-check failure. `message` is human-readable and names line:column."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None,
                 source: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column
        self.source = source


class CelResult(NamedTuple):
    """Outcome of one evaluation; exactly one of value/error is meaningful.

    A NamedTuple rather than a frozen dataclass: it is built on every evaluation, and a
    frozen dataclass costs about a microsecond more to construct.
    """

    value: object | None = None
    error: str | None = None

    def is_true(self) -> bool:
        # `is True` on purpose: 1, "true", a non-empty error string must never count as a match.
        return self.error is None and self.value is True

    @property
    def ok(self) -> bool:
        return self.error is None


TRUE = CelResult(value=True)
FALSE = CelResult(value=False)


class CelProgram(Protocol):
    source: str

    def evaluate(self, activation: Mapping[str, object]) -> CelResult: ...


class CelEngine(Protocol):
    name: str

    def compile(self, source: str, variables: Mapping[str, CelType]) -> CelProgram: ...

    def preparer(self, variables: Mapping[str, CelType]) -> Callable[[Mapping[str, object]], object]:
        """Convert an activation once for several programs compiled with `variables`."""
        ...
