"""ResolveAgent: the version a run pins at start, and what its model may be shown."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from checkpoint.engine.outcome import InvalidRequest
from checkpoint.policy import PolicySet, model
from checkpoint.policy.entries import FILLED
from checkpoint.policy.policyset import AgentVersion
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def resolve_agent(policies: PolicySet, name: str, version: str = "", *, to_pin: bool = False) -> pb.ResolveAgentResponse:
    """The live version of `name`, or the version named. `to_pin`: a new run will pin it, so a
    version that was never approved, or was retired, is refused."""
    agent = policies.agent_version(name, version) if version else policies.agents.get(name)
    if agent is None:
        known = name in policies.agents or bool(policies.catalog.versions(name))
        if version and known:
            raise InvalidRequest(codes.UNKNOWN_AGENT_VERSION, f"agent {name!r} has no version {version!r}", "agent_version")
        raise InvalidRequest(codes.UNKNOWN_AGENT, f"no agent named {name[:100]!r}", "agent")
    refusal = policies.pin_refusal(agent.name, agent.version) if to_pin else None
    if refusal is not None:
        retired = refusal == codes.AGENT_VERSION_RETIRED
        raise InvalidRequest(refusal, f"version {agent.version} of agent {agent.name!r} "
                             + ("was retired" if retired else
                                "is newer than this replica's catalog (its state arrives within a second)"
                                if refusal == codes.CATALOG_UNAVAILABLE else
                                "is not approved for new runs (pending, rejected, withdrawn, or narrowed away by a "
                                "later edit)") + ": a new run may not pin it",
                             "agent_version")
    budget = pb.Budget()
    for field, value in agent.budget.model_dump(exclude_none=True).items():
        setattr(budget, field, value)
    tools = sorted(agent.tools)
    response = pb.ResolveAgentResponse(
        agent=agent.name,
        agent_version=agent.version,
        persona=agent.persona,
        tools=tools,
        scope=pb.Scope(
            tools=tools,
            access=sorted(agent.access),
            images=agent.scope.images,
            nodes=agent.scope.nodes,
            connections=agent.scope.connections,
            threads=agent.scope.threads,
            subjects=agent.scope.subjects,
        ),
        budget=budget,
        policy_revision=policies.revision,
        tenant=agent.tenant,
        delegates=sorted(agent.delegates),
    )
    for tool_name in tools:
        spec = _reviewed_tool(policies, agent, tool_name)
        if spec is None:  # an old version may name a tool the current files dropped
            continue
        schema = struct_pb2.Struct()
        schema.update(_shown_schema(spec))
        response.tool_specs.add(name=spec.name, description=spec.description, input_schema=schema,
                                access=spec.access.value, templates=spec.templates or "")
    return response


def _reviewed_tool(policies: PolicySet, agent: AgentVersion, name: str) -> model.Tool | None:
    """The tool as the version records it: while a widening edit of it waits for review, the
    model is shown the definition its calls are decided within, not the one on disk."""
    tool = policies.tools.get(name)
    if tool is None:
        return None
    recorded = (agent.tool_defs or {}).get(name)
    if recorded is None or policies.file_versions.get(agent.name) == agent.version:
        return tool.spec
    try:
        return model.Tool.model_validate({"kind": "Tool", "name": name, **recorded})
    except ValueError:  # recorded by a reading of Tool documents since made stricter
        return tool.spec


def _shown_schema(tool: model.Tool) -> dict[str, Any]:
    """The input schema the model is shown: without the argument the checkpoint fills for a
    `templates:` tool (docs/skills.md), which a call may not give."""
    if tool.templates is None:
        return tool.input_schema
    filled = FILLED[tool.templates]
    properties = {k: v for k, v in tool.input_schema.get("properties", {}).items() if k != filled}
    return {**tool.input_schema, "properties": properties}
