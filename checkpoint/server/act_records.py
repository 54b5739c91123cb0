"""The record of an answer that is not a Check (StartRun, Approve, Reject, RecordAct, a catalog,
skill or learning act): one shape for every act, stamped with its decision id and time."""

from __future__ import annotations

import time
from typing import Any

from checkpoint.audit.record import format_time_ns
from checkpoint.policy.policyset import PolicySet
from checkpoint.policy.principals import Principal
from checkpoint.server import convert
from checkpoint.server.ids import new_decision_id
from warden import canonical
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def stamp(response: pb.CheckResponse) -> str:
    """Give an answer its decision id and time; the time as the record writes it."""
    now_ns = time.time_ns()
    response.decision_id = new_decision_id()
    convert.timestamp_from_ns(now_ns, response.decided_at)
    return format_time_ns(now_ns)


def act_record(response: pb.CheckResponse, stamped: str, policies: PolicySet, caller: str,
                principal: Principal | None, **fields: Any) -> dict[str, Any]:
    """The record of an answer that is not a Check (StartRun, Approve, Reject, RecordAct): what
    every record holds, then the act's own fields (which may override `rule`)."""
    return {
        "decision_id": response.decision_id,
        "time": stamped,
        "verdict": convert.verdict_name(response.verdict),
        "code": response.code,
        "rule": response.rule,
        "reason": response.reason,
        "policy_revision": policies.revision,
        "caller": caller,
        "principal": principal.name if principal is not None else None,
        **fields,
    }


MAX_ACT_DETAILS_BYTES = 4096


def bounded_details(details: dict[str, Any]) -> dict[str, Any]:
    """An act's details as recorded: whole when small (what was raised, the goal version), else
    their hash and size, so no caller can make one record (and the log) as large as a request."""
    try:
        size = len(canonical.dumps(details))
    except (ValueError, TypeError) as exc:
        return {"unrecordable": str(exc)[:200]}
    return details if size <= MAX_ACT_DETAILS_BYTES else {"sha256": canonical.sha256_hex(details), "bytes": size}


def forget_claimed_run(request: Any) -> str:
    """Drop a run context nobody vouched for, so a refusal is never filed under another run's id
    (a caller could otherwise write DENY records into any run's history); the claim stays in the
    reason, capped."""
    run = getattr(request, "run", None)
    if run is None or not request.HasField("run"):
        return ""
    claimed = run.run_id
    request.ClearField("run")
    return f" (the request claimed run {claimed[:64]!r})" if claimed else ""
