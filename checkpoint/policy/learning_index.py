"""The active learnings, compiled: what the decision function reads of them (docs/learnings.md).

A learning is advice, never authority: its match is a CEL condition over the proposed tool call
(`tool`, `args`, `agent`, `tenant`), type-checked when an admin promotes it like a rule's
condition at load. The checkpoint's learning store compiles the active ones into a
`LearningIndex` after every change, and the policy store hands it to `decide()` inside the
PolicySet (`PolicySet.with_learnings`), so a decision stays a function of (policy set, request):
no clock, no store read, per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint.cel import CelCompileError, CelProgram, CelType, get_engine
from checkpoint.cel import typed as cel_typed
from checkpoint.policy import celtypes

# What a learning's match may read. `tool`: name and access level; `args`: the call's arguments;
# `agent`: name, version, tenant, tools, access (as a rule's `agent`); `tenant`: the tenant's name.
LEARNING_VARIABLES: dict[str, CelType] = {
    "tool": CelType.MAP_STRING_DYN,
    "args": CelType.MAP_STRING_DYN,
    "agent": CelType.MAP_STRING_DYN,
    "tenant": CelType.STRING,
}
# The same, with the fields of `tool` and `agent` declared as a rule sees them (celtypes.py), for
# the type check at promotion; `args` stays a map: a learning may concern any tool.
LEARNING_SHAPES: dict[str, cel_typed.Shape] = {
    "tool": celtypes.TOOL,
    "args": CelType.MAP_STRING_DYN,
    "agent": celtypes.AGENT,
    "tenant": CelType.STRING,
}
WARNING, ERROR = "warning", "error"
SEVERITIES = (WARNING, ERROR)
MAX_MATCH_CHARS = 2000


class MatchError(ValueError):
    """A match that does not compile or does not return a bool: the message names line:column."""


def compile_match(source: str, cel_engine: str = "native") -> CelProgram:
    """Compile and type-check a learning's match as the loader checks a rule's condition: against
    the typed declarations (`tool.acess` is an error with a "did you mean"), and it must return a
    bool (a value only known when it runs, `args.flag`, must be compared: `args.flag == true`)."""
    if not source.strip():
        raise MatchError("a learning needs a match: a CEL condition over tool, args, agent, tenant")
    if len(source) > MAX_MATCH_CHARS:
        raise MatchError(f"the match is longer than {MAX_MATCH_CHARS} characters")
    checked = None
    if cel_typed.AVAILABLE:  # without the native wheel, the engine's own checks stand
        try:
            checked = cel_typed.checker_for(LEARNING_SHAPES).check(source)
        except cel_typed.TypedCompileError as exc:
            raise MatchError("\n".join(f"match:{p.line}:{p.column}: {p.message}\n"
                                       + cel_typed.frame(source, p.line, p.column, p.length)
                                       for p in exc.problems)) from None
    try:
        program = get_engine(cel_engine).compile(source, LEARNING_VARIABLES)
    except CelCompileError as exc:
        raise MatchError(f"match:{exc.message}") from None
    if checked is not None and checked != "BOOL":
        why = " (a value whose type is only known when it runs: compare it, e.g. `== true`)" if checked == "DYN" else ""
        raise MatchError(f"match:1:1: the match returns {checked}{why}; it must return a bool")
    return program


@dataclass(frozen=True, slots=True)
class ActiveLearning:
    id: str
    tenant: str
    agent: str  # "" : every agent of the tenant
    severity: str
    text: str
    reviewed_by: str
    match: str
    program: CelProgram = field(compare=False)


@dataclass(frozen=True)
class LearningIndex:
    """Active learnings by tenant; `prepare` converts one activation for all their programs."""

    by_tenant: Mapping[str, tuple[ActiveLearning, ...]]
    prepare: Callable[[dict[str, Any]], Any] | None = None
    problems: tuple[str, ...] = ()  # active learnings that could not be compiled (logged, shown)

    def for_call(self, tenant: str, agent: str) -> tuple[ActiveLearning, ...]:
        found = self.by_tenant.get(tenant)
        if not found:
            return ()
        return tuple(a for a in found if not a.agent or a.agent == agent)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_tenant.values())


EMPTY = LearningIndex({})


def build_index(rows: Iterable[Mapping[str, Any]], cel_engine: str,
                cache: dict[tuple[str, str], CelProgram] | None = None) -> LearningIndex:
    """The index of `rows` (active learnings as the store keeps them). A match that no longer
    compiles (a CEL runtime that changed what it accepts) is left out and named in `problems`."""
    by_tenant: dict[str, list[ActiveLearning]] = {}
    problems: list[str] = []
    for row in rows:
        key = (cel_engine, row["match"])
        program = cache.get(key) if cache is not None else None
        if program is None:
            try:
                program = compile_match(row["match"], cel_engine)
            except MatchError as exc:
                problems.append(f"learning {row['id']}: {exc}")
                continue
            if cache is not None:
                cache[key] = program
        by_tenant.setdefault(row["tenant"], []).append(ActiveLearning(
            id=row["id"], tenant=row["tenant"], agent=row["agent"] or "", severity=row["severity"],
            text=row["text"], reviewed_by=row["reviewed_by"] or "", match=row["match"], program=program))
    if not by_tenant:
        return LearningIndex({}, None, tuple(problems))
    return LearningIndex({t: tuple(sorted(v, key=lambda a: a.id)) for t, v in by_tenant.items()},
                         get_engine(cel_engine).preparer(LEARNING_VARIABLES), tuple(problems))

