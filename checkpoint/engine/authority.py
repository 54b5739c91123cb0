"""Authority flows downhill only: an agent's allowlist and scope, intersected with every
ancestor's and with every narrowing asked for on the way down."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from checkpoint.engine import codes
from checkpoint.engine.context import Call
from checkpoint.engine.outcome import DENY
from checkpoint.policy import CompiledTool
from checkpoint.policy.policyset import SCOPE_DIMENSIONS, PatternSet
from warden.checkpoint.v1 import checkpoint_pb2 as pb


@functools.lru_cache(maxsize=4096)
def _patterns(patterns: tuple[str, ...]) -> PatternSet:
    return PatternSet(patterns)


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


def check_touched(call: Call, touched: dict[str, list[str]]) -> None:
    """Step 3b: every image, node, connection and subject the call touches is inside scope."""
    for dim in SCOPE_DIMENSIONS:
        values = touched.get(dim)
        if not values:
            continue
        for link in reversed(call.links):
            allowed = link.agent.patterns[dim]
            narrowing: Sequence[str] = getattr(link.narrowing, dim) if link.narrowing is not None else ()
            narrowed = _patterns(tuple(narrowing)) if narrowing else None
            for value in values:
                if not allowed.matches(value) or (narrowed is not None and not narrowed.matches(value)):
                    raise call.trace.stop(
                        DENY, codes.OUT_OF_SCOPE[dim], f"scope.{dim}",
                        f"{dim[:-1]} {value!r} is outside the scope of {link.agent.name!r}"
                        + (" after narrowing" if narrowed is not None and allowed.matches(value) else ""),
                    )
        call.trace.add(f"scope.{dim}", "pass", detail=", ".join(values))


def child_authority(call: Call, child_tools: frozenset[str], child_access: frozenset[str],
                    narrowing: pb.Scope) -> pb.Scope:
    """What a delegated child may do: its own authority intersected with the whole chain's."""
    tools, access = set(child_tools), set(child_access)
    for link in call.links:
        tools &= link.agent.tools
        access &= link.agent.access
        if link.narrowing is not None:
            if link.narrowing.tools:
                tools &= set(link.narrowing.tools)
            if link.narrowing.access:
                access &= set(link.narrowing.access)
    if narrowing.tools:
        tools &= set(narrowing.tools)
    if narrowing.access:
        access &= set(narrowing.access)
    return pb.Scope(tools=sorted(tools), access=sorted(access))
