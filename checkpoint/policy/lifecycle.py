"""How one agent version compares with another: what a change widens, and how a reviewer reads it.

A change that only narrows (fewer tools, fewer delegates, fewer scope entries, lower budget
ceilings, the same persona and tenant) can apply at once, even where a tenant reviews changes:
it takes authority away. Anything else widens, and waits for a tenant admin. The comparison is
textual and conservative: a scope entry that is new as written counts as wider even when it
happens to match less, so a reviewer sees it.
"""

from __future__ import annotations

from typing import Any

from checkpoint.policy.policyset import SCOPE_DIMENSIONS
from warden.budget import FIELDS as BUDGET_FIELDS

# A version's life in the catalog. `live`: what new runs pin. `superseded`: live once, replaced by
# an approved change; a run may still pin it by id. `narrowed`: live once, replaced by an edit that
# only narrows: pinning it would give back what the edit took away, so no new run may. `pending`:
# proposed, waiting for review. `rejected`, `withdrawn` (a later proposal of the same source
# replaced it) and `retired` may never be pinned by a new run; a run already pinned to a retired
# version halts at its next check.
LIVE, SUPERSEDED, NARROWED, PENDING, REJECTED, WITHDRAWN, RETIRED = (
    "live", "superseded", "narrowed", "pending", "rejected", "withdrawn", "retired")
UNPINNABLE = frozenset({NARROWED, PENDING, REJECTED, WITHDRAWN, RETIRED})


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
    return lines


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
