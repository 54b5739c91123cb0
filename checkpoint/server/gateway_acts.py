"""What an MCP gateway decided by itself, put on the decision log beside the checkpoint's own
decisions (RecordAct act `gateway`, docs/mcp.md): a `tools/list` it filtered (the tools shown and
hidden, for which client) and a call it refused before or after any Check (a tool changed since it
was pinned, a tool no upstream serves, an approval not given). Recorded by the holder of the run's
token, naming no person, like a run's end; the gateway's refusal is recorded as a DENY with the
gateway's own stable code, so the log's readers find it as they find the checkpoint's denials.
"""

from __future__ import annotations

from typing import Any

from checkpoint.policy.principals import Principal
from checkpoint.server.runs import Established, Refused
from warden import codes
from warden.mcp import codes as gateway_codes

GATEWAY_ACT = "gateway"
EVENTS = frozenset({"listed", "refused"})
# only the gateway's own refusals: a gateway cannot put a checkpoint verdict on the log in its name
REFUSAL_CODES = frozenset(v for k, v in vars(gateway_codes).items() if k.isupper() and isinstance(v, str))
MAX_NAME = 128
MAX_TOOLS = 500


def _name(details: dict[str, Any], key: str, *, required: bool) -> str:
    value = details.get(key, "")
    if not isinstance(value, str) or len(value) > MAX_NAME or (required and not value):
        raise Refused(codes.INVALID_REQUEST, f"a gateway act's `{key}` is a name of 1 to {MAX_NAME} characters",
                      "act.details")
    return value


def _tools(details: dict[str, Any], key: str) -> list[str]:
    value = details.get(key, [])
    if (not isinstance(value, list) or len(value) > MAX_TOOLS
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value)):
        raise Refused(codes.INVALID_REQUEST, f"a gateway act's `{key}` is a list of at most {MAX_TOOLS} tool names",
                      "act.details")
    return sorted(value)


def gateway_event(person: str, principal: Principal, established: Established, details: dict[str, Any]) -> dict[str, Any]:
    """The act's details, checked: `event` listed {client, shown, hidden} or refused {client, tool,
    upstream, code, reason}. Only a principal that may still check the run's agent records one."""
    if person:
        raise Refused(codes.INVALID_REQUEST, "a gateway act names no person", "act.person")
    if not principal.may_check(established.run.tenant, established.agent):
        raise Refused(codes.CALLER_NOT_PERMITTED, f"principal {principal.name!r} may not record a gateway act in a "
                      f"run of agent {established.agent!r}", "principal")
    event = details.get("event")
    if event not in EVENTS:
        raise Refused(codes.INVALID_REQUEST, f"a gateway act's `event` is one of {sorted(EVENTS)}", "act.details")
    out: dict[str, Any] = {"event": event, "client": _name(details, "client", required=True)}
    if event == "listed":
        out.update(shown=_tools(details, "shown"), hidden=_tools(details, "hidden"))
    else:
        code = details.get("code")
        if code not in REFUSAL_CODES:
            raise Refused(codes.INVALID_REQUEST, f"a gateway refusal's `code` is one of the gateway's codes "
                          f"({', '.join(sorted(REFUSAL_CODES))})", "act.details")
        reason = details.get("reason", "")
        out.update(code=code, tool=_name(details, "tool", required=True), upstream=_name(details, "upstream", required=False),
                   reason=reason[:500] if isinstance(reason, str) else "")
        if "approval_id" in details:
            out["approval_id"] = _name(details, "approval_id", required=False)
    unknown = sorted(set(details) - set(out) - {"reason", "approval_id"})
    if unknown:
        raise Refused(codes.INVALID_REQUEST, f"a gateway act has no {unknown}", "act.details")
    return out


def summary(details: dict[str, Any]) -> str:
    if details["event"] == "listed":
        return (f"tools/list for client {details['client']}: {len(details['shown'])} shown, "
                f"{len(details['hidden'])} hidden")
    upstream = f" of upstream {details['upstream']}" if details["upstream"] else ""
    return f"the gateway refused {details['tool']}{upstream} for client {details['client']}: {details['code']}"
