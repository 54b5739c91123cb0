"""The learning store (DATA/learnings.db): proposed and reviewed lessons, and each one's life.

"Learnings are advice, never authority" (docs/learnings.md). Every tripped breaker, failed run and
failed task becomes a *proposed* learning with its provenance (run, decision, agent@version, code,
when); an agent may propose one too. Proposals act on nothing. Only a tenant admin promotes one to
*active*, choosing its severity (`warning` or `error`) and its match (a CEL condition over the
proposed call); only active learnings act, and one that nothing has triggered for 90 days goes
*stale*: it stops acting until an admin reviews it again.

    proposed --promote--> active --(90 days untriggered)--> stale --review--> active
        |                   |  ^--review (re-review, edit)--'                   |
        '--reject--> rejected  '--retire--> retired <--retire-------------------'

The same occurrence (the same breaker or failure code on the same agent version, or the same
text from the same agent version) does not propose again while its learning is proposed, active
or stale: it counts there (`occurrences`, the latest provenance kept).

Each act below checks, calls `record(change)` (which appends it to the decision log and raises
when it cannot), then writes: recorded before it takes effect, or not done. A state changes only
here, under one lock, in one transaction, and only by a move the one table of states.py holds
(the agents', skills' and templates' too). The clock is injected (`clock`), so tests move time.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint.policy import catalog_upgrade, states
from checkpoint.policy.catalog_items import items
from checkpoint.policy.catalog_store import INSERTED, CatalogStore
from checkpoint.policy.learning_index import ERROR, SEVERITIES, WARNING
from checkpoint.policy.sqlite_store import SqliteStore
from checkpoint.policy.states import ACTIVE, LEARNING, PROPOSED, REJECTED, RETIRED, STALE

STATUSES = (PROPOSED, ACTIVE, STALE, REJECTED, RETIRED)
OPEN = (PROPOSED, ACTIVE, STALE)  # where a repeated occurrence is counted instead of proposed again
SOURCES = ("breaker", "run_failed", "task_failed", "agent")
STALE_AFTER_DAYS = 90
MAX_TEXT = 2000
KEEP_PROVENANCE = 10  # the first occurrence and the latest nine
MAX_PROPOSED_PER_AGENT = 50  # proposals waiting for review, per agent
TRIGGER_FLUSH_SECONDS = 60.0  # how often a trigger's time is written (staleness counts in days)
SWEEPER = "learnings-sweep"  # who moves an untriggered learning to stale


class LearningError(Exception):
    """An act that cannot be done; `code` is a stable code (docs/codes.md)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Proposal:
    """What a breaker, the driver or an agent reports; `by` names the proposer."""

    tenant: str
    agent: str
    agent_version: str
    source: str
    code: str
    text: str
    by: str
    run_id: str = ""
    decision_id: str = ""
    tool: str = ""
    severity: str = WARNING  # asked for; a proposal holds at most `warning`
    suggested_match: str = ""


@dataclass(frozen=True)
class LearningChange:
    """One act on a learning, as the decision log records it."""

    act: str  # propose, occurrence, promote, review, reject, retire, stale
    learning: str
    tenant: str
    agent: str
    agent_version: str
    by: str
    details: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        return {"act": self.act, "learning": self.learning, **self.details}


Recorder = Callable[[LearningChange], None]


def _no_record(_change: LearningChange) -> None:
    return None


def iso(t: float | None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t)) if t else ""


# the table as sqlite-utils made it, so stores from before read and write the same
_COLUMNS = {"id": "text", "tenant": "text", "agent": "text", "agent_version": "text", "tool": "text",
            "status": "text", "source": "text", "code": "text", "text": "text", "severity": "text",
            "severity_capped": "integer", "match": "text", "suggested_match": "text", "proposed_by": "text",
            "proposed_at": "float", "reviewed_by": "text", "reviewed_at": "float", "review_note": "text",
            "occurrences": "integer", "last_occurrence_at": "float", "triggers": "integer",
            "last_triggered_at": "float", "stale_at": "float", "provenance": "text", "dedup": "text"}


def _last_seen(row: dict[str, Any]) -> float:
    """When an active learning last showed it is still needed: reviewed, or triggered."""
    return max(row["reviewed_at"] or 0, row["last_triggered_at"] or 0)


def _dedup_key(p: Proposal) -> str:
    what = hashlib.sha256(p.text.encode("utf-8")).hexdigest()[:16] if p.source == "agent" else p.code
    return "|".join((p.source, p.tenant, p.agent, p.agent_version, p.tool, what))


class LearningStore:
    def __init__(self, path: str | Path | None = None, *, clock: Callable[[], float] = time.time,
                 stale_after_days: float = STALE_AFTER_DAYS, store: CatalogStore | None = None):
        """`path=None` keeps the store in memory (tests, one-shot tools); `store`: the rows kept
        elsewhere than the SQLite file at `path` (catalog_store.py)."""
        self.clock = clock
        self.stale_after = stale_after_days * 86400.0
        self._pending: dict[str, tuple[float, int]] = {}  # id -> (last trigger, triggers) not written yet
        self._pending_lock = threading.Lock()
        self._last_flush = time.monotonic()
        # several checkpoint workers share the file: an act's check and write hold across them
        # the table below is a view of the catalog's one table shape (catalog_items.py)
        self._db = items(store if store is not None else SqliteStore(path, upgrade=catalog_upgrade))
        self._lock = self._db.lock
        with self._lock:  # workers opening a new file together race to make the schema: one at a time
            self._db.create_table("learnings", _COLUMNS, "id", not_null=("id", "tenant", "status"),
                                  index=("dedup", "status"))

    # -- reads -------------------------------------------------------------------------------

    def get(self, learning_id: str) -> dict[str, Any] | None:
        self.flush()
        with self._lock:
            rows = self._db.rows("learnings", {"id": learning_id})
        return self._shaped(rows[0]) if rows else None

    def rows(self, *, tenant: str = "", agent: str = "", status: str = "") -> list[dict[str, Any]]:
        """Learnings newest first, filtered by what is given."""
        self.flush()
        where = {column: value for column, value in (("tenant", tenant), ("agent", agent), ("status", status))
                 if value}
        with self._lock:
            rows = self._db.rows("learnings", where, order=("-proposed_at", "-" + INSERTED))
        return [self._shaped(r) for r in rows]

    def acting(self) -> list[dict[str, Any]]:
        """The active learnings that still act: triggered or reviewed within the last 90 days."""
        self.flush()
        cutoff = self.clock() - self.stale_after
        with self._lock:
            rows = self._db.rows("learnings", {"status": ACTIVE}, order=("id",))
        return [self._shaped(r) for r in rows if _last_seen(r) > cutoff]

    def _shaped(self, row: dict[str, Any]) -> dict[str, Any]:
        row = dict(row)
        row["provenance"] = json.loads(row["provenance"] or "[]")
        if row["status"] == ACTIVE:  # when it goes stale unless something triggers it
            row["stale_at"] = max(row["reviewed_at"] or 0, row["last_triggered_at"] or 0) + self.stale_after
        return row

    # -- proposals ---------------------------------------------------------------------------

    def propose(self, p: Proposal, *, record: Recorder = _no_record) -> tuple[LearningChange, dict[str, Any]]:
        """A new proposal, or one more occurrence of an open learning with the same key."""
        if p.source not in SOURCES:
            raise LearningError("invalid_request", f"source must be one of {', '.join(SOURCES)}")
        if p.severity not in SEVERITIES:
            raise LearningError("invalid_request", f"severity must be {' or '.join(SEVERITIES)}")
        text = p.text.strip()[:MAX_TEXT]
        if not text:
            raise LearningError("invalid_request", "a learning says what was learned (text)")
        now = self.clock()
        seen = {"run_id": p.run_id, "decision_id": p.decision_id, "agent": p.agent,
                "agent_version": p.agent_version, "code": p.code, "time": iso(now), "tool": p.tool}
        key = _dedup_key(p)
        with self._lock:
            found = self._db.rows("learnings", {"dedup": key, "status": OPEN}, order=("proposed_at",), limit=1)
            if found:
                row = found[0]
                provenance = [*json.loads(row["provenance"] or "[]"), seen]
                provenance = provenance[:1] + provenance[1:][-(KEEP_PROVENANCE - 1):]
                change = LearningChange("occurrence", row["id"], row["tenant"], row["agent"], p.agent_version, p.by,
                                        {"source": p.source, "code": p.code, "occurrences": row["occurrences"] + 1,
                                         "run": p.run_id, "decision": p.decision_id})
                record(change)
                with self._db.transaction():
                    self._db.update("learnings", "id", (row["id"],), {
                        "occurrences": row["occurrences"] + 1, "last_occurrence_at": now,
                        "provenance": json.dumps(provenance)})
                return change, self._get_locked(row["id"])
            waiting = len(self._db.rows("learnings", {"tenant": p.tenant, "agent": p.agent, "status": PROPOSED}))
            if waiting >= MAX_PROPOSED_PER_AGENT:  # a run cannot fill the store, nor bury the admin's list
                raise LearningError("too_many_proposals", f"{waiting} learnings of agent {p.agent!r} already wait for "
                                    "review: an admin reviews them before more are taken")
            learning_id = "lrn-" + secrets.token_hex(5)
            capped = p.severity == ERROR
            change = LearningChange("propose", learning_id, p.tenant, p.agent, p.agent_version, p.by, {
                "source": p.source, "code": p.code, "text": text, "tool": p.tool, "severity": WARNING,
                "severity_capped": capped, "suggested_match": p.suggested_match, "run": p.run_id,
                "decision": p.decision_id})
            record(change)
            with self._db.transaction():
                self._db.insert("learnings", {
                    "id": learning_id, "tenant": p.tenant, "agent": p.agent, "agent_version": p.agent_version,
                    "tool": p.tool, "status": states.next_state(LEARNING, None, "propose"), "source": p.source, "code": p.code, "text": text,
                    "severity": WARNING, "severity_capped": int(capped), "match": "",
                    "suggested_match": p.suggested_match, "proposed_by": p.by, "proposed_at": now,
                    "reviewed_by": "", "reviewed_at": None, "review_note": "", "occurrences": 1,
                    "last_occurrence_at": now, "triggers": 0, "last_triggered_at": None, "stale_at": None,
                    "provenance": json.dumps([seen]), "dedup": key})
            return change, self._get_locked(learning_id)

    def _get_locked(self, learning_id: str) -> dict[str, Any]:
        return self._shaped(self._db.rows("learnings", {"id": learning_id})[0])

    # -- a person's acts ----------------------------------------------------------------------

    def act(self, learning_id: str, act: str, *, by: str, severity: str = "", match: str = "", text: str = "",
            note: str = "", record: Recorder = _no_record) -> tuple[LearningChange, dict[str, Any]]:
        """promote (proposed -> active), review (active or stale -> active, optionally edited),
        reject (proposed -> rejected), retire (active or stale -> retired). `match` must have been
        compiled by the caller (the policy set's CEL engine type-checks it)."""
        self.flush()
        with self._lock:
            found = self._db.rows("learnings", {"id": learning_id})
            if not found:
                raise LearningError("unknown_learning", f"no learning {learning_id[:40]!r}")
            row = found[0]
            status = row["status"]
            if act not in ("promote", "review", "reject", "retire"):
                raise LearningError("invalid_request", f"unknown act {act!r}")
            try:
                moved_to = states.next_state(LEARNING, status, act)
            except states.Refused as refused:
                raise LearningError(refused.code, f"learning {learning_id} is {status}, not proposed"
                                    if refused.code == "not_pending" else f"learning {learning_id} is {status}: only "
                                    "an active or stale learning is reviewed again or retired") from None
            now = self.clock()
            update: dict[str, Any] = {"reviewed_by": by, "reviewed_at": now, "review_note": note[:1000]}
            details: dict[str, Any] = {"note": note[:1000], "was": status}
            if act in ("promote", "review"):
                severity = severity or (row["severity"] if act == "review" else "")
                if severity not in SEVERITIES:
                    raise LearningError("invalid_request", f"severity must be {' or '.join(SEVERITIES)}")
                match = match or (row["match"] if act == "review" else "")
                if not match:
                    raise LearningError("invalid_request", "a learning needs a match: a CEL condition over "
                                        "tool, args, agent, tenant")
                text = text.strip()[:MAX_TEXT] or row["text"]
                update.update(status=moved_to, severity=severity, match=match, text=text, stale_at=None)
                details.update(severity=severity, match=match, text=text)
                edited = {k: row[k] for k in ("severity", "match", "text") if status != PROPOSED and row[k] != update[k]}
                if edited:
                    details["before"] = edited
            else:
                update["status"] = moved_to
            change = LearningChange(act, learning_id, row["tenant"], row["agent"], row["agent_version"], by, details)
            record(change)
            with self._db.transaction():
                self._db.update("learnings", "id", (learning_id,), update)
            return change, self._get_locked(learning_id)

    # -- acting, triggering, going stale -------------------------------------------------------

    def triggered(self, ids: list[str]) -> None:
        """These learnings were in a Check answer. Written at most once a minute per store (a
        learning goes stale after days), and before any read or sweep."""
        now = self.clock()
        with self._pending_lock:
            for learning_id in ids:
                _, count = self._pending.get(learning_id, (0.0, 0))
                self._pending[learning_id] = (now, count + 1)
            due = time.monotonic() - self._last_flush >= TRIGGER_FLUSH_SECONDS
        if due:
            self.flush()

    def flush(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, {}
            self._last_flush = time.monotonic()
        if not pending:
            return
        with self._lock, self._db.transaction():
            for learning_id, (when, count) in pending.items():
                for row in self._db.rows("learnings", {"id": learning_id}):
                    self._db.update("learnings", "id", (learning_id,), {
                        "last_triggered_at": max(row["last_triggered_at"] or 0, when),
                        "triggers": (row["triggers"] or 0) + count})

    def sweep(self, *, record: Recorder = _no_record) -> list[LearningChange]:
        """Move every active learning nothing triggered (nor reviewed) for 90 days to stale.
        The recorder should not raise here: going stale is the clock's doing, not a request
        anyone could be refused (the service logs a record it could not write)."""
        self.flush()
        now = self.clock()
        changes = []
        with self._lock:
            rows = self._db.rows("learnings", {"status": ACTIVE}, order=("id",))
            for row in (r for r in rows if _last_seen(r) <= now - self.stale_after):
                last = max(row["reviewed_at"] or 0, row["last_triggered_at"] or 0)
                change = LearningChange("stale", row["id"], row["tenant"], row["agent"], row["agent_version"],
                                        SWEEPER, {"last_triggered": iso(row["last_triggered_at"]),
                                                  "reviewed": iso(row["reviewed_at"]), "since": iso(last)})
                record(change)
                with self._db.transaction():
                    self._db.update("learnings", "id", (row["id"],), {
                        "status": states.next_state(LEARNING, row["status"], "stale"), "stale_at": now})
                changes.append(change)
        return changes

    def close(self) -> None:
        self.flush()
        self._db.close()
