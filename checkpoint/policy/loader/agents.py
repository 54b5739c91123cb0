"""Agent documents compiled: what a version resolves to (its tools, scope, skills, the rules that
apply to it) and the shadow candidates that stand beside a live agent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from checkpoint.policy import entries, model
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.loader.documents import Doc
from checkpoint.policy.policyset import (
    SCOPE_DIMENSIONS,
    TYPED_DIMENSIONS,
    AgentVersion,
    rules_for,
    tool_definition,
)
from checkpoint.policy.subjects import SubjectError, read_pattern
from warden import canonical

if TYPE_CHECKING:
    from checkpoint.policy.loader.compiler import Compiler


def compile_agent(
    c: Compiler, doc: Doc, tools: Mapping[str, Any], agents: Mapping[str, Any], tenants: dict[str, model.Tenant],
    rules: Iterable[Any] = (),
) -> AgentVersion | None:
    """`tools` and `agents` are read by name; of a tool or a rule, only its `spec`. The version
    covers the definitions of the tools it resolves and of the rules that can apply to it, so
    an edit of one is a new version, reviewed like an edit of the agent."""
    spec: model.Agent = doc.spec
    wildcard = "*" in spec.allowlist
    resolved: set[str] = set()
    for i, name in enumerate(spec.allowlist):
        if name == "*":
            continue
        tool = tools.get(name)
        if tool is None:
            c.unknown(doc, ("allowlist", i), "Tool", name, tools, f"agent {spec.name!r}: allowlist names unknown tool {name!r}")
        elif tool.spec.agent_management:
            c.error(doc, ("allowlist", i), f"agent {spec.name!r}: {name!r} manages agents and can never be on an allowlist")
        else:
            resolved.add(name)
    if wildcard:
        resolved |= {n for n, t in tools.items() if not t.spec.agent_management}
    for i, name in enumerate(spec.delegates):
        if name not in agents:
            c.unknown(doc, ("delegates", i), "Agent", name, agents,
                      f"agent {spec.name!r}: delegates to unknown agent {name!r}")
        elif name == spec.name:
            c.error(doc, ("delegates", i), f"agent {spec.name!r} cannot delegate to itself")
    if spec.tenant not in tenants:
        c.unknown(doc, ("tenant",), "Tenant", spec.tenant, tenants, f"agent {spec.name!r}: unknown tenant {spec.tenant!r}")
    for dim in SCOPE_DIMENSIONS:
        for i, text in enumerate(getattr(spec.scope, dim)):
            try:
                read_pattern(text, typed=dim in TYPED_DIMENSIONS)
            except SubjectError as exc:
                c.error(doc, ("scope", dim, i), f"agent {spec.name!r}: scope.{dim}: {exc}")
    needed = {tools[n].spec.access.value for n in resolved if n in tools}
    missing = needed - {a.value for a in spec.scope.access}
    if not wildcard and missing:
        c.error(doc, ("scope", "access"),
                   f"agent {spec.name!r}: its tools need access {', '.join(sorted(missing))} that its scope does not grant")
    version = AgentVersion(
        name=spec.name,
        version="",
        tenant=spec.tenant,
        persona=spec.persona,
        description=spec.description,
        wildcard=wildcard,
        tools=frozenset(resolved),
        scope=spec.scope,
        budget=spec.budget,
        delegates=frozenset(spec.delegates),
        skills=frozenset(spec.skills),
        tool_defs={n: tool_definition(tools[n].spec) for n in sorted(resolved) if n in tools},
        rule_defs=rules_for(spec.name, rules),
    )
    snapshot = version.snapshot()
    return AgentVersion.from_snapshot(canonical.sha256_hex(snapshot)[:20], snapshot)


def agent_skills(c: Compiler, doc: Doc, defined: Mapping[entries.Key, Any], catalog: AgentCatalog) -> None:
    """An agent lists skills of its own tenant that the files define or the catalog holds."""
    spec: model.Agent = doc.spec
    if len(set(spec.skills)) != len(spec.skills):
        c.error(doc, ("skills",), f"agent {spec.name!r} lists a skill twice")
    for i, name in enumerate(spec.skills):
        key = (entries.SKILL, spec.tenant, name)
        if key not in defined and not catalog.entries.known(*key):
            c.error(doc, ("skills", i), f"agent {spec.name!r}: unknown skill {name!r} in tenant {spec.tenant!r}")


def shadow_agents(c: Compiler, docs: list[Doc], tools: Mapping[str, Any], agents: Mapping[str, Doc],
                   tenants: dict[str, model.Tenant], catalog: AgentCatalog,
                   rules: list[Doc]) -> dict[str, AgentVersion]:
    """`mode: shadow` Agent documents: each a candidate for the live agent of its name, in its
    tenant (a shadow never moves an agent: that is an edit reviewed like any other)."""
    found: dict[str, AgentVersion] = {}
    for d in c.unique(docs).values():
        spec: model.Agent = d.spec
        live = agents.get(spec.name)
        if live is None:
            c.error(d, ("mode",), f"shadow agent {spec.name!r} has no live agent of that name to stand beside "
                       "(a shadow is a candidate for an agent the files define in mode enforce)")
            continue
        if spec.tenant != live.spec.tenant:
            c.error(d, ("tenant",), f"shadow agent {spec.name!r} names tenant {spec.tenant!r}; the live agent's "
                       f"is {live.spec.tenant!r} ({live.file})")
            continue
        agent_skills(c, d, c.defined, catalog)
        version = compile_agent(c, d, tools, agents, tenants, rules)
        if version is not None:
            found[spec.name] = version
    return found
