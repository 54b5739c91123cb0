"""How one agent version compares with another: what a change widens, and how a reviewer reads it.

A change that only narrows (fewer tools, fewer delegates, fewer scope entries, lower budget
ceilings, the same persona and tenant, a tool that reads one more scope dimension, one more rule)
can apply at once, even where a tenant reviews changes: it takes authority away. Anything else
widens, and waits for a tenant admin. A version covers the definitions of the tools it resolves
and the rules that can apply to it, so an edit of a tool file or a rule file is compared here
too. The comparison is textual and conservative: a scope entry, a `touches` expression, an input
schema or a rule that is new as written counts as wider even when it happens to match less, so
a reviewer sees it.
"""

from __future__ import annotations

import json
from typing import Any

from checkpoint.policy.policyset import SCOPE_DIMENSIONS

# A version's life in the catalog is states.py's (one table for agents, skills, templates and
# learnings); its names stay importable from here
from checkpoint.policy.states import (  # noqa: F401
    LIVE,
    NARROWED,
    PENDING,
    REJECTED,
    RETIRED,
    SUPERSEDED,
    UNPINNABLE,
    WITHDRAWN,
)
from warden.budget import FIELDS as BUDGET_FIELDS


def widenings(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What `new` (a version snapshot) may do that `old` may not, in words; [] when it only narrows."""
    if old is None:
        return ["a new agent"]
    out: list[str] = []
    if new["tenant"] != old["tenant"]:
        out.append(f"tenant {old['tenant']} -> {new['tenant']}")
    if new["persona"] != old["persona"]:
        out.append("persona changed")
    if new["wildcard"] and not old["wildcard"]:
        out.append("allowlist '*' (every tool, and tools added later)")
    added = sorted(set(new["tools"]) - set(old["tools"]))
    if added:
        out.append("tools added: " + ", ".join(added))
    delegates = sorted(set(new["delegates"]) - set(old["delegates"]))
    if delegates:
        out.append("delegates added: " + ", ".join(delegates))
    # a skill grants nothing, but its text reaches the model like a persona: a person reads it first
    skills = sorted(set(new.get("skills", [])) - set(old.get("skills", [])))
    if skills:
        out.append("skills added: " + ", ".join(skills))
    for dim in ("access", *SCOPE_DIMENSIONS):
        more = [e for e in new["scope"].get(dim, []) if e not in old["scope"].get(dim, [])]
        if more:
            out.append(f"scope.{dim} added: " + ", ".join(more))
    for field in BUDGET_FIELDS:
        then, now = old["budget"].get(field), new["budget"].get(field)
        if then is not None and (now is None or now > then):
            out.append(f"budget.{field} {then} -> {'unset' if now is None else now}")
    # a version recorded before versions covered tools and rules holds none: nothing to compare
    old_tools, new_tools = old.get("tool_defs"), new.get("tool_defs")
    if old_tools is not None and new_tools is not None:
        for name in sorted(set(old_tools) & set(new_tools)):
            out += [f"tool {name}: {w}" for w in tool_widenings(old_tools[name], new_tools[name])]
    old_rules, new_rules = old.get("rule_defs"), new.get("rule_defs")
    if old_rules is not None and new_rules is not None:
        for name in sorted(old_rules):
            if name not in new_rules:
                out.append(f"rule {name} no longer applies")
            elif new_rules[name] != old_rules[name]:
                out.append(f"rule {name} changed")
    return out


def tool_widenings(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What a tool's definition `new` lets its calls do that `old` does not; [] when it only narrows.

    Narrowing: a scope dimension newly read by `touches`, the tool marked as managing agents,
    `run` removed (it no longer runs), more argument paths masked in the log. Every other
    difference (a touches expression changed or dropped, the input schema, access level, how and
    where it runs, its description, which the model reads) widens."""
    out: list[str] = []
    for key in sorted(set(old) | set(new)):
        then, now = old.get(key), new.get(key)
        if then == now:
            continue
        if key == "touches":
            then, now = then or {}, now or {}
            for dim in sorted(set(then) | set(now)):
                if then.get(dim) == now.get(dim) or dim not in then:
                    continue  # unchanged, or newly read: scope decides one more dimension
                out.append(f"touches.{dim} dropped" if now.get(dim) is None else f"touches.{dim} changed")
        elif key == "agent_management":
            if not now:
                out.append("no longer marked agent_management")
        elif key == "run":
            if now is not None:
                out.append("run changed")
        elif key == "audit":
            then, now = then or {}, now or {}
            for part in ("drop", "hash"):
                unmasked = [p for p in then.get(part, []) if p not in now.get(part, [])]
                if unmasked:
                    out.append(f"audit.{part} no longer masks: " + ", ".join(unmasked))
        else:
            out.append(f"{key} changed")
    return out


def diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """The change from `old` to `new`, one line per difference: `+` added, `-` removed, `~` changed."""
    if old is None:
        old = {"tenant": "", "persona": "", "description": "", "wildcard": False, "tools": [], "delegates": [],
               "scope": {}, "budget": {}}
    lines: list[str] = []
    for key in ("tenant", "persona", "description"):
        if old.get(key, "") != new.get(key, ""):
            lines.append(f"~ {key}: {old.get(key, '')!r} -> {new.get(key, '')!r}")
    if old["wildcard"] != new["wildcard"]:
        lines.append(f"{'+' if new['wildcard'] else '-'} allowlist: '*'")
    for label, then, now in (("tool", old["tools"], new["tools"]), ("delegate", old["delegates"], new["delegates"]),
                             ("skill", old.get("skills", []), new.get("skills", []))):
        lines += [f"+ {label}: {t}" for t in sorted(set(now) - set(then))]
        lines += [f"- {label}: {t}" for t in sorted(set(then) - set(now))]
    for dim in ("access", *SCOPE_DIMENSIONS):
        then, now = old["scope"].get(dim, []), new["scope"].get(dim, [])
        lines += [f"+ scope.{dim}: {e}" for e in now if e not in then]
        lines += [f"- scope.{dim}: {e}" for e in then if e not in now]
    for field in BUDGET_FIELDS:
        then, now = old["budget"].get(field), new["budget"].get(field)
        if then != now:
            lines.append(f"~ budget.{field}: {'unset' if then is None else then} -> {'unset' if now is None else now}")
    for label, key in (("tool", "tool_defs"), ("rule", "rule_defs")):
        then, now = old.get(key) or {}, new.get(key) or {}
        for name in sorted(set(then) & set(now)):
            if then[name] != now[name]:
                lines.append(f"~ {label} {name}: {_compact(then[name])} -> {_compact(now[name])}")
        if label == "rule":
            lines += [f"+ rule: {n}" for n in sorted(set(now) - set(then))]
            lines += [f"- rule: {n}" for n in sorted(set(then) - set(now))]
    return lines


def _compact(definition: dict[str, Any]) -> str:
    return json.dumps(definition, sort_keys=True, separators=(",", ":"))[:2000]


def definition(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The Agent document (as in a policy file) that loads as this snapshot, given the same tools."""
    doc: dict[str, Any] = {
        "kind": "Agent",
        "name": snapshot["name"],
        "tenant": snapshot["tenant"],
        "persona": snapshot["persona"],
        "allowlist": ["*"] if snapshot["wildcard"] else sorted(snapshot["tools"]),
        "scope": {k: v for k, v in snapshot["scope"].items() if v},
        "budget": dict(snapshot["budget"]),
        "delegates": sorted(snapshot["delegates"]),
    }
    if snapshot.get("description"):
        doc["description"] = snapshot["description"]
    if snapshot.get("skills"):
        doc["skills"] = sorted(snapshot["skills"])
    return doc
