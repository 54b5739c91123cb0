"""`warden policy check` warnings: settings that load fine but are probably not what was meant.

Warnings never fail the check (the exit status stays that of the load); they name the agent and
what to look at:

- an agent whose scope lists `subjects: ["*"]` may work on every subject that is not off-limits;
- an agent with no effective ceiling on a breaker (the built-in instance defaults leave none, so
  this only shows if they were removed), or with a ceiling of 0, which halts before the first
  action that breaker is checked before: in a policy file 0 means "none at all", not "unlimited";
- a tenant that declares no `roles`: every person a principal lets in may operate, approve and
  read its runs, and nobody is its admin (the implicit `default` tenant only when an agent is in it);
- a principal whose identities include a pattern (`token:*`, the persons' token lines) and whose
  audit right is `*`: every person it matches reads the whole log, which no tenant's roles narrow;
- a tool that reads a target (an argument named like one: host, url, target, address, ...; or a
  string of format uri, hostname, ipv4, ipv6, email) but declares no `touches`: no agent's scope
  or off-limits list is asked where its calls go;
- a tool_call rule that reads `args` without naming its tools, or naming a tool whose input
  schema cannot be read as fields: there `args` is a map of dyn, so a misspelt argument is not
  caught at load (policy/celtypes.py);
- a tool_call rule that reads an argument as written (`args.target`) which a tool it applies to
  touches as a subject or connection: scope and off-limits read that value normalised, so the
  rule should too (`touched.subjects`), or another spelling of the same host slips past it.
"""

from __future__ import annotations

import re
from typing import Any

from checkpoint.engine.breakers import BREAKERS, narrowest
from checkpoint.policy import PolicySet, model
from checkpoint.policy.celtypes import untyped_reason


def warnings(policies: PolicySet) -> list[str]:
    out: list[str] = []
    instance = policies.instance
    for agent in sorted(policies.agents.values(), key=lambda a: a.name):
        who = f"agent {agent.name!r}"
        if "*" in agent.scope.subjects:
            out.append(f'{who}: scope subjects ["*"] reaches every subject that is not off-limits')
        tenant = policies.tenants.get(agent.tenant)
        levels: list[object] = [instance.ceilings, agent.budget]
        if tenant is not None:
            levels.insert(1, tenant.ceilings)
        ceilings = narrowest({}, levels)
        for b in BREAKERS:
            ceiling = ceilings.get(b.ceiling)
            if ceiling is None:
                out.append(f"{who}: no ceiling on breaker {b.name} ({b.ceiling}): nothing bounds {b.what}")
            elif ceiling == 0:
                out.append(f"{who}: breaker {b.name} has ceiling 0 ({b.ceiling}), so it halts the agent's "
                           f"first {' / '.join(b.checks)}; 0 means none at all, not unlimited")
        for field in ("per_owner_usd", "tenant_usd"):
            limits = [v for v in (getattr(instance.daily_spend, field),
                                  getattr(tenant.daily_spend, field) if tenant else None) if v is not None]
            if not limits:
                out.append(f"{who}: no daily_spend {field}: nothing bounds the day's spend")
    out.extend(_role_warnings(policies))
    out.extend(_untyped_args_warnings(policies))
    out.extend(_raw_subject_warnings(policies))
    out.extend(_unfenced_tool_warnings(policies))
    return out


_ARG = re.compile(r"\bargs\s*\.\s*([A-Za-z_]\w*)")


def _raw_subject_warnings(policies: PolicySet) -> list[str]:
    """Rules over the text of an argument a tool's typed `touches` read (subjects, connections)."""
    out: list[str] = []
    for rule in sorted(policies.rules, key=lambda r: r.name):
        if "args" not in rule.reads or "tool_call" not in rule.spec.actions:
            continue
        read = set(_ARG.findall(rule.spec.condition))
        for name in sorted(rule.spec.tools or policies.tools):
            tool = policies.tools.get(name)
            if tool is None:
                continue
            for dim in ("subjects", "connections"):
                source = getattr(tool.spec.touches, dim) or ""
                for arg in sorted(read & set(_ARG.findall(source))):
                    out.append(f"rule {rule.name!r} ({rule.where}): reads args.{arg} as written, which tool {name!r} "
                               f"touches as one of its {dim}; scope and off-limits read it normalised (case, "
                               f"Unicode, URL parts, address spellings): compare touched.{dim} instead")
    return out


# words of an argument's name that say it names where a call goes (a name's parts split on _ and -)
TARGET_WORDS = frozenset({"target", "targets", "host", "hosts", "hostname", "url", "urls", "uri", "domain", "domains",
                          "address", "addr", "ip", "ips", "endpoint", "server", "node", "image", "subject",
                          "subjects", "connection", "cidr", "network", "email", "recipient", "repo", "repository"})
TARGET_FORMATS = frozenset({"uri", "iri", "uri-reference", "iri-reference", "hostname", "idn-hostname", "ipv4",
                            "ipv6", "email", "idn-email"})


def _target_arguments(schema: dict[str, Any]) -> list[str]:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return []
    found = []
    for name, spec in properties.items():
        words = set(re.split(r"[_\-]+", str(name).lower()))
        fmt = spec.get("format") if isinstance(spec, dict) else None
        items = spec.get("items") if isinstance(spec, dict) else None
        if isinstance(items, dict) and fmt is None:
            fmt = items.get("format")
        if words & TARGET_WORDS or fmt in TARGET_FORMATS:
            found.append(str(name))
    return found


def _unfenced_tool_warnings(policies: PolicySet) -> list[str]:
    out: list[str] = []
    for name, tool in sorted(policies.tools.items()):
        spec = tool.spec
        if spec.agent_management or any(getattr(spec.touches, dim) is not None for dim in type(spec.touches).model_fields):
            continue
        targets = _target_arguments(spec.input_schema)
        if targets:
            out.append(f"tool {name!r}: argument {', '.join(map(repr, targets))} reads a target, but the tool declares "
                       f"no touches, so no agent's scope or off-limits subject is asked where its calls go; declare "
                       f"touches (subjects, connections, nodes, images, threads) over that argument")
    return out


def _untyped_args_warnings(policies: PolicySet) -> list[str]:
    out: list[str] = []
    for rule in sorted(policies.rules, key=lambda r: r.name):
        if "args" not in rule.reads or "tool_call" not in rule.spec.actions:
            continue
        if not rule.spec.tools:
            out.append(f"rule {rule.name!r} ({rule.where}): reads args without naming its tools, so args is a map "
                       f"of dyn there and a misspelt argument only shows when a call comes; name them "
                       f"(tools: [...]) to have args checked against their input schemas")
            continue
        for name in rule.spec.tools:
            tool = policies.tools.get(name)
            reason = untyped_reason(tool.spec.input_schema) if tool is not None else None
            if reason is not None:
                out.append(f"rule {rule.name!r} ({rule.where}): args is a map of dyn, not checked at load, "
                           f"because tool {name!r} cannot be typed: {reason}")
    return out


def _role_warnings(policies: PolicySet) -> list[str]:
    out: list[str] = []
    used = {agent.tenant for agent in policies.agents.values()}
    for name, tenant in sorted(policies.tenants.items()):
        if tenant.roles is not None:
            continue
        implicit = name == "default" and tenant == model.Tenant(kind="Tenant", name="default")
        if implicit and name not in used:
            continue
        out.append(f"tenant {name!r}: declares no roles, so every person a principal lets in may start, "
                   f"resume, cancel and approve its runs and read its records, and nobody is its admin; "
                   f"name them under roles (admin, approver, operator, auditor)")
    for name, principal in sorted(policies.principals.by_name.items()):
        if principal.audit_tenants() is None and any("*" in i for i in principal.spec.identities):
            out.append(f"principal {name!r}: audit ['*'] with an identity pattern: every credential it matches "
                       f"reads every record, whatever the tenants' roles; list the tenants instead (their "
                       f"auditors then read them)")
    return out
