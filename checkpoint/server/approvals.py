"""Approvals the checkpoint honours: only ones its own log can vouch for.

A request may carry `approval {decision_id, approver}`, saying a person approved an earlier
REQUIRE_APPROVAL answer. The engine lets an approve-if rule pass on it, so the service checks the
reference first: the decision must be in the log, be REQUIRE_APPROVAL, and be for this very
action (same run, action, agent version, tool and recorded arguments: for a delegation, the child
agent and version); and it must not have been used already.
Otherwise the call is denied with `approval_invalid`, and recorded like any other decision.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from checkpoint.engine.codes import APPROVAL_INVALID

__all__ = ["APPROVAL_INVALID", "approval_problem"]


def approval_problem(
    records: Callable[..., Iterable[Mapping[str, Any]]],
    *,
    decision_id: str,
    approver: str,
    run_id: str,
    agent_version: str,
    action: str,
    tool: str | None,
    logged_arguments: Any,
) -> str | None:
    """Why the approval cannot be honoured, or None when it can.

    `records(run_id=..., verdict=...)` reads the run's stored decisions (the decision log's `read`).
    """
    if not decision_id or not approver:
        return "an approval names the approved decision and the person who approved it"
    if not run_id:
        return "an approved call names its run"
    asked = next(
        (
            r
            for r in records(run_id=run_id, verdict="REQUIRE_APPROVAL")
            if r.get("decision_id") == decision_id
        ),
        None,
    )
    if asked is None:
        return f"decision {decision_id[:64]!r} is not a REQUIRE_APPROVAL answer of run {run_id[:64]!r}"
    mismatched = [
        name
        for name, recorded, now in (
            ("action", asked.get("action"), action),
            ("tool", asked.get("tool"), tool),
            ("agent version", asked.get("agent_version"), agent_version),
            ("arguments", asked.get("arguments"), logged_arguments),
        )
        if recorded != now
    ]
    if mismatched:
        return f"decision {decision_id[:64]!r} approved a different call ({', '.join(mismatched)})"
    marker = f"(decision {decision_id[:64]})"
    for r in records(run_id=run_id, verdict="ALLOW"):
        if r.get("rule") == "approval" and (r.get("reason") or "").endswith(marker):
            return f"decision {decision_id[:64]!r} was already approved and used by decision {r.get('decision_id')}"
    return None
