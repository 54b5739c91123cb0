"""Authority flows downhill only: an agent's allowlist and scope, intersected with every
ancestor's and with every narrowing asked for on the way down."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from checkpoint.engine.context import Call
from checkpoint.engine.outcome import DENY
from checkpoint.policy import AgentVersion, CompiledTool
from checkpoint.policy.policyset import SCOPE_DIMENSIONS, TYPED_DIMENSIONS
from checkpoint.policy.subjects import Pattern, Subject, SubjectError, SubjectSet, read_pattern
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb


@functools.lru_cache(maxsize=4096)
def _patterns(dim: str, patterns: tuple[str, ...]) -> SubjectSet:
    """A narrowing's (or a level's) entries, compiled once; an entry that does not compile matches nothing."""
    return SubjectSet.lenient(patterns, typed=dim in TYPED_DIMENSIONS)


@functools.lru_cache(maxsize=4096)
def _pattern(dim: str, text: str) -> Pattern | None:
    try:
        return read_pattern(text, typed=dim in TYPED_DIMENSIONS)
    except SubjectError:
        return None


def check_tool(call: Call, tool: CompiledTool) -> None:
    """Step 2: the allowlist, by name, for the acting agent and everyone above it."""
    trace, agent = call.trace, call.agent
    assert agent is not None
    if tool.spec.agent_management:
        raise trace.stop(
            DENY, codes.AGENT_MANAGEMENT_TOOL, "allowlist.agent_management",
            f"{tool.name!r} manages agents; no agent may call it, whatever its allowlist",
        )
    if agent.wildcard and call.mode == "background":
        raise trace.stop(
            DENY, codes.WILDCARD_IN_BACKGROUND, "allowlist.wildcard",
            f"agent {agent.name!r} has the '*' allowlist, which is refused in background runs",
        )
    for link in reversed(call.links):
        if tool.name not in link.agent.tools:
            whose = "its" if link.agent is agent else f"its ancestor {link.agent.name!r}'s"
            raise trace.stop(
                DENY, codes.TOOL_NOT_ALLOWED, "allowlist",
                f"{tool.name!r} is not on {whose} allowlist (agent {agent.name!r})",
            )
        if link.narrowing is not None and link.narrowing.tools and tool.name not in link.narrowing.tools:
            raise trace.stop(
                DENY, codes.TOOL_NOT_ALLOWED, "allowlist.narrowing",
                f"{tool.name!r} was narrowed away when {link.agent.name!r} was delegated to",
            )
    trace.add("allowlist", "pass")


def check_access(call: Call, tool: CompiledTool) -> None:
    """Step 3a: the tool's access level must be held by the agent and everyone above it."""
    access = tool.spec.access.value
    for link in reversed(call.links):
        narrowed = link.narrowing is not None and link.narrowing.access and access not in link.narrowing.access
        if access not in link.agent.access or narrowed:
            raise call.trace.stop(
                DENY, codes.ACCESS_NOT_ALLOWED, "scope.access",
                f"{tool.name!r} needs {access} access, which {link.agent.name!r} does not hold"
                + (" after narrowing" if narrowed else ""),
            )
    call.trace.add("scope.access", "pass")


def check_touched(call: Call, touched: dict[str, list[Subject]]) -> None:
    """Step 3b: every image, node, connection and subject the call touches is inside scope."""
    for dim in SCOPE_DIMENSIONS:
        values = touched.get(dim)
        if not values:
            continue
        for link in reversed(call.links):
            allowed = link.agent.patterns[dim]
            narrowing: Sequence[str] = getattr(link.narrowing, dim) if link.narrowing is not None else ()
            narrowed = _patterns(dim, tuple(narrowing)) if narrowing else None
            for value in values:
                if not allowed.matches(value) or (narrowed is not None and not narrowed.matches(value)):
                    raise call.trace.stop(
                        DENY, codes.OUT_OF_SCOPE[dim], f"scope.{dim}",
                        f"{dim[:-1]} {value.text[:200]!r} is outside the scope of {link.agent.name!r}"
                        + (" after narrowing" if narrowed is not None and allowed.matches(value) else ""),
                    )
        if call.trace.enabled:  # the detail costs a join: build it only for explain
            call.trace.add(f"scope.{dim}", "pass", detail=", ".join(v.text for v in values))


def child_authority(call: Call, child: AgentVersion, narrowing: pb.Scope) -> pb.Scope:
    """What a delegated child may do: its own authority intersected with the whole chain's.

    Tools and access are sets, so that is exact. Scope entries are typed patterns, and the
    intersection of two is not always one: the report keeps each entry that every level covers,
    which never claims more than the child may do (calls are checked against every level anyway).
    """
    tool_levels: list[set[str]] = [set(child.tools)]
    access_levels: list[set[str]] = [set(child.access)]
    pattern_levels: dict[str, list[tuple[str, ...]]] = {dim: [tuple(getattr(child.scope, dim))] for dim in SCOPE_DIMENSIONS}
    narrowings = [link.narrowing for link in call.links if link.narrowing is not None] + [narrowing]
    for link in call.links:
        tool_levels.append(set(link.agent.tools))
        access_levels.append(set(link.agent.access))
        for dim in SCOPE_DIMENSIONS:
            pattern_levels[dim].append(tuple(getattr(link.agent.scope, dim)))
    for n in narrowings:  # an empty list in a narrowing means "not narrowed on this dimension"
        if n.tools:
            tool_levels.append(set(n.tools))
        if n.access:
            access_levels.append(set(n.access))
        for dim in SCOPE_DIMENSIONS:
            if getattr(n, dim):
                pattern_levels[dim].append(tuple(getattr(n, dim)))
    scope = pb.Scope(tools=sorted(set.intersection(*tool_levels)), access=sorted(set.intersection(*access_levels)))
    for dim, levels in pattern_levels.items():
        candidates = sorted({p for level in levels for p in level})
        getattr(scope, dim).extend(p for p in candidates if all(_covered(dim, p, level) for level in levels))
    return scope


def _covered(dim: str, pattern: str, level: tuple[str, ...]) -> bool:
    """Whether every value `pattern` matches is matched by some entry of `level` (sound, not complete).
    An entry that does not compile is never reported: it would claim something no level grants."""
    compiled = _pattern(dim, pattern)
    return compiled is not None and _patterns(dim, level).covers(compiled)
