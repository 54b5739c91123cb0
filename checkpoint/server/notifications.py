"""What a notification says: a decision a person should see (a REQUIRE_APPROVAL, a HALT, a
handoff), as a generic JSON body or as a Slack-compatible one, linking to the call on the audit page.

A notification leaves the checkpoint for a chat or a ticket queue, so it carries what a person
needs to find the call, never the call's arguments: those stay behind the auditor's credential on
the audit page the link opens (docs/approvals.md).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

from checkpoint.server.notify_settings import KINDS

__all__ = ["KINDS", "NOTE_FIELDS", "Notification", "body_for", "notification"]

# the record's fields a notification reads
NOTE_FIELDS = ("decision_id", "time", "verdict", "code", "rule", "reason", "tenant", "run_id", "root_run_id",
               "agent", "agent_version", "accountable_person", "action", "tool", "approval_rules")
NOTIFIED_VERDICTS = frozenset({"REQUIRE_APPROVAL", "HALT"})
HANDOFF_CODE = "handoff"
MAX_TEXT = 500


@dataclass(frozen=True, slots=True)
class Notification:
    """One decision worth a person's attention: `event` is approval_required, halted or handoff."""

    event: str
    decision_id: str
    time: str
    verdict: str
    code: str
    rule: str
    reason: str
    tenant: str
    run_id: str
    root_run_id: str
    agent: str
    agent_version: str
    accountable_person: str
    action: str
    tool: str
    approval_rules: list[str]
    approval_deadline: str  # empty unless event is approval_required
    handoff_to: str  # empty unless event is handoff
    link: str  # the call on the audit page; empty when no public URL is set


def event_of(verdict: str, code: str) -> str | None:
    """The notification a recorded answer calls for, or None."""
    if verdict == "REQUIRE_APPROVAL":
        return "approval_required"
    if verdict == "HALT":
        return HANDOFF_CODE if code == HANDOFF_CODE else "halted"
    return None


def audit_link(base: str, run_id: str, decision_id: str) -> str:
    """The audit page opened at the run, the decision marked (checkpoint/audit/web/static/app.js)."""
    if not base or not run_id:
        return ""
    return f"{base.rstrip('/')}/#run={quote(run_id, safe='')}&decision={quote(decision_id, safe='')}"


def notification(record: dict[str, Any], *, deadline: str = "", handoff_to: str = "",
                 public_url: str = "") -> Notification | None:
    """The notification of a record just committed, or None when its answer calls for none."""
    verdict, code = str(record.get("verdict") or ""), str(record.get("code") or "")
    event = event_of(verdict, code)
    if event is None:
        return None

    def text(name: str) -> str:
        return str(record.get(name) or "")[:MAX_TEXT]

    rules = text("approval_rules")
    return Notification(
        event=event, decision_id=text("decision_id"), time=text("time"), verdict=verdict, code=code,
        rule=text("rule"), reason=text("reason"), tenant=text("tenant"), run_id=text("run_id"),
        root_run_id=text("root_run_id"), agent=text("agent"), agent_version=text("agent_version"),
        accountable_person=text("accountable_person"), action=text("action"), tool=text("tool"),
        approval_rules=rules.split(",") if rules else [], approval_deadline=deadline,
        handoff_to=handoff_to[:MAX_TEXT],
        link=audit_link(public_url, text("run_id"), text("decision_id")),
    )


def generic_body(note: Notification) -> bytes:
    return json.dumps({"type": note.event, **asdict(note)}, sort_keys=True, separators=(",", ":")).encode()


_HEADLINES = {
    "approval_required": "A call waits for a person's approval",
    "halted": "A run was halted",
    HANDOFF_CODE: "A case was handed to a person",
}


def _mrkdwn(text: str) -> str:
    """Slack's three control characters escaped, so a reason cannot make a link or a mention."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(note: Notification) -> bytes:
    """An incoming-webhook message: `text` for notifications and old clients, `blocks` to read."""
    headline = _HEADLINES[note.event]
    what = note.tool or note.action
    lines = [f"*{headline}*: `{_mrkdwn(what)}` of agent `{_mrkdwn(note.agent)}` "
             f"(tenant `{_mrkdwn(note.tenant)}`, run `{_mrkdwn(note.run_id)}`)",
             f"{_mrkdwn(note.code)}: {_mrkdwn(note.reason)}"]
    if note.approval_deadline:
        lines.append(f"Answer by {note.approval_deadline} (`warden approve` / `warden reject`)")
    if note.handoff_to:
        lines.append(f"Handed to {_mrkdwn(note.handoff_to)}")
    if note.link:
        lines.append(f"<{note.link}|Open the call on the audit page>")
    context = f"decision {note.decision_id} · {note.time} · accountable: {_mrkdwn(note.accountable_person)}"
    body = {
        "text": f"{headline}: {what} of {note.agent} ({note.code})",
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(lines)}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def body_for(kind: str, note: Notification) -> bytes:
    return slack_body(note) if kind == "slack" else generic_body(note)
