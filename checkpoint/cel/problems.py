"""What is wrong with an expression, in words for the person who wrote it: each problem with its
line and column, a code frame under it, a "did you mean" for a misspelt name, and time zone
literals checked at load."""

from __future__ import annotations

import re
from typing import NamedTuple

from checkpoint.cel.api import CelCompileError

# What a misspelt function is compared with: CEL's standard functions, macros and methods.
FUNCTIONS = (
    "size", "contains", "startsWith", "endsWith", "matches", "has", "all", "exists", "exists_one", "map",
    "filter", "int", "uint", "double", "string", "bytes", "bool", "dyn", "type", "duration", "timestamp",
    "getFullYear", "getMonth", "getDayOfYear", "getDayOfMonth", "getDate", "getDayOfWeek", "getHours",
    "getMinutes", "getSeconds", "getMilliseconds",
)


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


def locate(text: str, name: str, column: int) -> int:
    """The 1-based column of the whole-word occurrence of `name` in `text` nearest `column`."""
    spots = [m.start() + 1 for m in re.finditer(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text)]
    return min(spots, key=lambda s: (abs(s - column), s)) if spots else column
