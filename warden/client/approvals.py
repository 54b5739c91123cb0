"""Where a person's approval waits for the agent that asked for it.

The checkpoint answers a person's Approve with an approval token bound to the run, the decision,
the exact call and the approver; only the checkpoint can make one, and it honours it once. The
person's command puts that token here; the adapter that asked (a hook, the gateway) takes it and
sends the call again with it. The inbox grants nothing by itself: a token it holds is only worth
something to the checkpoint, for that one call.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
  decision_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  outcome TEXT NOT NULL,      -- approved | rejected
  token TEXT NOT NULL,        -- the approval token ('' for a rejection)
  approver_decision TEXT NOT NULL,
  at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS asked (
  decision_id TEXT PRIMARY KEY,
  run_id TEXT NOT NULL,
  tool TEXT NOT NULL,
  arguments TEXT NOT NULL,    -- JSON, for the person to read before they decide
  reason TEXT NOT NULL,
  asked_by TEXT NOT NULL,     -- the adapter and the principal it checks for
  at REAL NOT NULL
)
"""


@dataclass(frozen=True)
class Asked:
    """A call that waits for a person: what they read before they approve or reject it."""

    decision_id: str
    run_id: str
    tool: str
    arguments: dict[str, Any]
    reason: str
    asked_by: str
    at: float


@dataclass(frozen=True)
class ApprovalOutcome:
    decision_id: str  # the REQUIRE_APPROVAL decision
    run_id: str
    approved: bool
    token: str  # relay as Approval.token with the same call (empty when rejected)
    approver_decision: str  # the decision id of the person's recorded act


class ApprovalInbox:
    """A SQLite file shared by the person's command and the adapter on the same machine."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.executescript(_SCHEMA)
        self.path.chmod(0o600)  # tokens are bound to one call, but still nobody else's to read

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10, isolation_level=None)

    def ask(self, asked: Asked) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO asked VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (asked.decision_id, asked.run_id, asked.tool, json.dumps(asked.arguments, default=repr),
                        asked.reason, asked.asked_by, asked.at))

    def waiting(self) -> list[Asked]:
        """The calls asked for and not yet answered, oldest first."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM asked WHERE decision_id NOT IN (SELECT decision_id FROM approvals) "
                              "ORDER BY at").fetchall()
        return [Asked(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5], r[6]) for r in rows]

    def asked(self, decision_id: str) -> Asked | None:
        return next((a for a in self.waiting() if a.decision_id == decision_id), None)

    def put(self, outcome: ApprovalOutcome) -> None:
        with self._connect() as db:
            db.execute("INSERT OR REPLACE INTO approvals VALUES (?, ?, ?, ?, ?, ?)",
                       (outcome.decision_id, outcome.run_id, "approved" if outcome.approved else "rejected",
                        outcome.token, outcome.approver_decision, time.time()))

    def peek(self, decision_id: str) -> ApprovalOutcome | None:
        with self._connect() as db:
            row = db.execute("SELECT decision_id, run_id, outcome, token, approver_decision FROM approvals "
                             "WHERE decision_id = ?", (decision_id,)).fetchone()
        if row is None:
            return None
        return ApprovalOutcome(row[0], row[1], row[2] == "approved", row[3], row[4])

    def take(self, decision_id: str) -> ApprovalOutcome | None:
        """The outcome, removed: a token is relayed once (the checkpoint would refuse a second use)."""
        found = self.peek(decision_id)
        if found is not None:
            with self._connect() as db:
                db.execute("DELETE FROM approvals WHERE decision_id = ?", (decision_id,))
                db.execute("DELETE FROM asked WHERE decision_id = ?", (decision_id,))
        return found

    def wait(self, decision_id: str, timeout: float, *, poll: float = 0.1) -> ApprovalOutcome | None:
        """The person's answer once it is here, or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.take(decision_id)
            if found is not None or time.monotonic() >= deadline:
                return found
            time.sleep(min(poll, max(0.0, deadline - time.monotonic())))
