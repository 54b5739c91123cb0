"""The SQLite run store: everything the driver knows about its runs, in one file (the RunStore of
driver/runs/store.py; the only place in the driver that opens a database).

Tables (sqlite-utils, WAL):
- runs: one row per run: pinned agent version, status, pause code, counters, budget, and for a
  child run its parent, tree root, depth, chain of authority and the checkpoint's chain token;
- goals: (run_id, version) -> the goal a person wrote; amendments add versions;
- events: the append-only event log of every run (seq is global and increasing);
- transcript: the model-visible conversation, kept apart from run state;
- calls: every tool call the model proposed, per turn, with its decision and result (a delegation
  is a call whose result is the child run's outcome), and the driver's own calls that verify a
  final report's `call_ok` criteria (`verifies`);
- approvals: REQUIRE_APPROVAL answers waiting for, or decided by, a person;
- receipts: the toolrunner's receipts, by decision id (`verifies` names the criterion when the
  call was the driver's own check, not the run's work);
- spend: USD per model call, for the daily owner and tenant allowances;
- pauses: a person's pause of a run (or its reach to a child run) as an intent, written before
  the act goes on the checkpoint's record and closed in the same transaction that holds the
  run, so a driver that stops in between applies it on restart, once.

Events are never updated or deleted. A driver that restarts reads runs back from here: a run that
was running is picked up where its last committed step left it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import sqlite_utils

from driver.errors import RunStateError
from driver.runs.model import (
    AWAITING_APPROVAL,
    AWAITING_CHILD,
    FINAL_EVENTS,
    JSON_RUN_FIELDS,
    OPEN_PAUSE_STATES,
    PARENT_PAUSED,
    PAUSABLE,
    PAUSED,
    RUN_COUNTERS,
    RUNNING,
    TERMINAL,
    Approval,
    Event,
    EventKind,
    Pause,
    PauseState,
    Run,
    RunStatus,
    now,
    status_event,
    today,
)
from warden.private import private_sqlite

_RUN_COLUMNS: dict[str, Any] = {
    "run_id": str, "agent": str, "agent_version": str, "tenant": str, "owner": str, "mode": str,
    "provider": str, "provider_options": str, "model": str, "note": str, "status": str, "code": str, "reason": str, "goal_version": int,
    "budget": str, "persona": str, "tool_specs": str, "policy_revision": str, "plan": str,
    "has_plan": int, "created_at": float, "updated_at": float, "stretch_started_at": float,
    "stretch": int, "stretch_first_turn": int, "stretch_tokens": int, "stretch_turns": int, "total_turns": int, "total_tokens": int,
    "consecutive_failures": int, "drift": int, "provider_refusals": int, "provider_refused_for_good": int,
    "spend_usd": float, "descendant_stretch_turns": int, "descendant_total_turns": int,
    "model_attempts": int, "turn": int, "nudged": int, "missing": str,
    "parent_run_id": str, "root_run_id": str, "depth": int, "run_token": str, "delegates": str,
    "final": str,
    "paused_by": str,  # the person whose pause (code paused / parent_paused) holds the run
    "skills": str,  # the skills the run pinned (name, version, description: never the text)
}
_CALL_COLUMNS: dict[str, Any] = {
    "id": int, "run_id": str, "turn": int, "idx": int, "call_id": str, "tool": str,
    "arguments": str, "args_sha": str, "plan_step": str, "status": str, "result": str,
    "decision_id": str, "grant": bytes, "verdict": str, "code": str, "approval_id": str, "child_run_id": str,
    "verifies": str,  # the criterion a call the driver made itself verifies (call_ok); "" for the model's
    # the arguments the grant covers when the checkpoint filled some in (a template's spec): what
    # the toolrunner is sent; `arguments` stay the proposed ones, which a new check decides again
    "granted_arguments": str,
}
_RECEIPT_COLUMNS: dict[str, Any] = {"decision_id": str, "run_id": str, "tool": str, "exit_code": int, "code": str,
                                    "output": str, "receipt": str, "created_at": float, "verifies": str}


# A pause's life: see PauseState.
_PAUSE_COLUMNS: dict[str, Any] = {
    "pause_id": str, "run_id": str, "code": str, "person": str, "reason": str, "note": str,
    "parent_run_id": str, "state": str, "created_at": float,
}


def _call_row(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "arguments": json.loads(r["arguments"]), "result": json.loads(r["result"]) if r["result"] else None}


def _run(row: dict[str, Any]) -> Run:
    """A stored row as a Run; a row that does not read as one (a field that is not JSON, a status
    no driver writes) is refused, never guessed at: `run_state_unavailable`."""
    try:
        for k in JSON_RUN_FIELDS:
            row[k] = json.loads(row[k]) if row[k] else None
        # JSON fields that hold a collection are never null in a Run (a row an older driver wrote
        # may have them empty)
        for k, empty in (("budget", {}), ("provider_options", {}), ("missing", []), ("delegates", []),
                         ("tool_specs", [])):
            if row[k] is None:
                row[k] = empty
        row["status"] = RunStatus(row["status"])
    except (ValueError, TypeError) as exc:
        raise RunStateError(f"run {row.get('run_id')!r} cannot be read: {exc}",
                            code="run_state_unavailable") from None
    return Run(**row)


def _approval(row: dict[str, Any]) -> Approval:
    return Approval(**{**row, "arguments": json.loads(row["arguments"])})


def _pause(row: dict[str, Any]) -> Pause:
    return Pause(**{**row, "state": PauseState(row["state"])})


class SqliteRunStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        private_sqlite(self.path)
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self._create()

    def _t(self, name: str) -> sqlite_utils.db.Table:
        return self.db.table(name)

    def _get(self, table: str, pk: str, what: str) -> dict[str, Any]:
        """One row by primary key; a missing one is `<what>_not_found`."""
        with self._lock:
            try:
                return dict(self._t(table).get(pk))
            except sqlite_utils.db.NotFoundError:
                raise RunStateError(f"no {what} {pk!r}", code=f"{what}_not_found") from None

    def _create(self) -> None:
        if "runs" not in self.db.table_names():
            self._t("runs").create(_RUN_COLUMNS, pk="run_id")
            self._t("goals").create({"run_id": str, "version": int, "goal": str, "author": str, "created_at": float},
                               pk=("run_id", "version"))
            self._t("events").create({"seq": int, "run_id": str, "time": float, "kind": str, "data": str}, pk="seq")
            self._t("events").create_index(["run_id", "seq"])
            self._t("transcript").create({"id": int, "run_id": str, "entry": str}, pk="id")
            self._t("transcript").create_index(["run_id", "id"])
            self._t("calls").create(_CALL_COLUMNS, pk="id")
            self._t("calls").create_index(["run_id", "turn"])
            self._t("approvals").create({
                "approval_id": str, "run_id": str, "call": int, "decision_id": str, "tool": str,
                "arguments": str, "code": str, "rule": str, "reason": str, "status": str,
                "decided_by": str, "decided_at": float, "note": str, "created_at": float, "token": str,
            }, pk="approval_id")
            self._t("receipts").create(_RECEIPT_COLUMNS, pk="decision_id")
            self._t("spend").create({"id": int, "day": str, "owner": str, "tenant": str, "run_id": str,
                                "usd": float}, pk="id")
            self._t("spend").create_index(["day", "owner"])
        # A store written by an older driver gains the newer columns (empty), nothing else changes.
        for table, columns in (("runs", _RUN_COLUMNS), ("calls", _CALL_COLUMNS), ("approvals", {"token": str}),
                               ("receipts", _RECEIPT_COLUMNS)):
            have = set(self._t(table).columns_dict)
            for name, typ in columns.items():
                if name not in have:
                    self._t(table).add_column(name, typ, not_null_default="" if typ is str else 0)
        self._t("runs").create_index(["parent_run_id"], if_not_exists=True)
        self._t("runs").create_index(["root_run_id"], if_not_exists=True)
        if "pauses" not in self.db.table_names():
            self._t("pauses").create(_PAUSE_COLUMNS, pk="pause_id")
        # One open pause per run: a second person's pause while one is under way is refused,
        # and a cascade that reaches a run twice adds nothing.
        self.db.execute("CREATE UNIQUE INDEX IF NOT EXISTS pauses_open ON pauses (run_id) "
                        "WHERE state IN ('intent', 'recorded')")

    # -- runs -----------------------------------------------------------------------------

    def create_run(self, **fields: Any) -> Run:
        t = now()
        row: dict[str, Any] = {c: (0 if typ in (int, float) else "") for c, typ in _RUN_COLUMNS.items()}
        # the checkpoint mints run ids (StartRun, or an allowed delegation): none is made up here
        row.update(run_id=fields.pop("run_id"), status=RUNNING,
                   created_at=t, updated_at=t, stretch_started_at=t, stretch=1, goal_version=1,
                   plan="null", missing="[]", provider_options="{}", budget="{}", delegates="[]")
        for k, v in fields.items():
            if k not in _RUN_COLUMNS:
                raise KeyError(k)
            row[k] = json.dumps(v) if k in JSON_RUN_FIELDS else v
        row["root_run_id"] = row["root_run_id"] or row["run_id"]
        with self._lock:
            self._t("runs").insert(row)
        return self.run(row["run_id"])

    def run(self, run_id: str) -> Run:
        return _run(self._get("runs", run_id, "run"))

    def runs(self, status: str | None = None, limit: int = 100, root_run_id: str = "",
             tenants: list[str] | None = None) -> list[Run]:
        """Newest first; with `root_run_id`, that delegation tree, oldest first; with `tenants`,
        only runs of those tenants (an empty list: none)."""
        clauses, params = [], []
        if tenants is not None:
            clauses.append(f"tenant IN ({', '.join('?' * len(tenants))})" if tenants else "0")
            params += tenants
        if status:
            clauses.append("status = ?")
            params.append(status)
        if root_run_id:
            clauses.append("(run_id = ? OR root_run_id = ?)")
            params += [root_run_id, root_run_id]
        order = "created_at" if root_run_id else "created_at desc"
        with self._lock:
            ids = [r["run_id"] for r in self._t("runs").rows_where(" AND ".join(clauses) or None, params or None,
                                                                    order_by=order, limit=limit)]
        return [self.run(i) for i in ids]

    def has_run(self, run_id: str) -> bool:
        with self._lock:
            return self.db.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone() is not None

    def children(self, run_id: str) -> list[Run]:
        """The runs this run delegated to, oldest first."""
        with self._lock:
            ids = [r["run_id"] for r in self._t("runs").rows_where("parent_run_id = ?", [run_id],
                                                                    order_by="created_at")]
        return [self.run(i) for i in ids]

    def tree(self, root_run_id: str) -> tuple[int, int]:
        """(runs, tokens) of a whole delegation tree, its root included."""
        with self._lock:
            row = self.db.execute(
                "SELECT COUNT(*), COALESCE(SUM(total_tokens), 0) FROM runs WHERE run_id = ? OR root_run_id = ?",
                [root_run_id, root_run_id]).fetchone()
        return int(row[0]), int(row[1])

    def call_for_child(self, child_run_id: str) -> dict[str, Any] | None:
        with self._lock:
            rows = list(self._t("calls").rows_where("child_run_id = ?", [child_run_id], limit=1))
        return _call_row(rows[0]) if rows else None

    def update_run(self, run_id: str, **fields: Any) -> Run:
        """Set fields of a run (never its status: that moves only by the transitions below)."""
        if "status" in fields or "run_id" in fields:
            raise KeyError("status" if "status" in fields else "run_id")
        for k in fields:
            if k not in _RUN_COLUMNS:
                raise KeyError(k)
        for k in JSON_RUN_FIELDS:
            if k in fields:
                fields[k] = json.dumps(fields[k])
        fields["updated_at"] = now()
        with self._lock:
            self._t("runs").update(run_id, fields)
            self.changed.notify_all()
        return self.run(run_id)

    def set_status(self, run_id: str, status: RunStatus, code: str, reason: str) -> bool:
        """Move a run that has not ended; False when it already ended (a cancel won the race)."""
        with self._lock:
            cur = self.db.execute(
                f"UPDATE runs SET status = ?, code = ?, reason = ?, updated_at = ? WHERE run_id = ? "
                f"AND status NOT IN ({', '.join('?' for _ in TERMINAL)})",
                [status, code, reason, now(), run_id, *TERMINAL])
            self.changed.notify_all()
            return cur.rowcount == 1

    def set_status_logged(self, run_id: str, status: RunStatus, code: str, reason: str, /, **event: Any) -> bool:
        """Move a run that has not ended and append its event `run_<status>` in one transaction: a
        watcher never sees the status without its event, nor an event for a move that lost a race
        (False, nothing written), and a crash in between leaves neither."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                moved = self.set_status(run_id, status, code, reason)
                if moved:
                    self.append_event(run_id, status_event(RunStatus(status)), code=code, reason=reason, **event)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            return moved

    def transition(self, run_id: str, frm: RunStatus, to: RunStatus, code: str, reason: str) -> bool:
        """Move a run from `frm` to `to`; False (and nothing changed) when it is not in `frm`."""
        with self._lock:
            cur = self.db.execute(
                "UPDATE runs SET status = ?, code = ?, reason = ?, updated_at = ? WHERE run_id = ? AND status = ?",
                [to, code, reason, now(), run_id, frm])
            self.changed.notify_all()
            return cur.rowcount == 1

    def hold(self, run_id: str, code: str, reason: str, person: str, /, **event: Any) -> bool:
        """A person's pause: move a run that is running or waiting (PAUSABLE) to paused, naming the
        person, and append its `run_paused` event, in one transaction. False (nothing written) when
        it is paused or ended already. The run's worker stops at its next step boundary."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                moved = self._hold(run_id, code, reason, person, **event)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            self.changed.notify_all()
            return moved

    def _hold(self, run_id: str, code: str, reason: str, person: str, /, **event: Any) -> bool:
        """hold()'s statements, inside the caller's transaction."""
        cur = self.db.execute(
            f"UPDATE runs SET status = ?, code = ?, reason = ?, paused_by = ?, updated_at = ? "
            f"WHERE run_id = ? AND status IN ({', '.join('?' for _ in PAUSABLE)})",
            [PAUSED, code, reason, person, now(), run_id, *PAUSABLE])
        moved = cur.rowcount == 1
        if moved:
            self.append_event(run_id, EventKind.RUN_PAUSED, code=code, reason=reason, person=person, **event)
        return moved

    # -- pauses ---------------------------------------------------------------------------

    def add_pause(self, run_id: str, code: str, person: str, reason: str, note: str = "",
                  parent_run_id: str = "") -> Pause | None:
        """A pause of `run_id` as an intent, before anything else of it happens; None when the
        run already has one under way."""
        pause_id = "pause-" + uuid.uuid4().hex[:16]
        with self._lock:
            cur = self.db.execute(
                "INSERT INTO pauses (pause_id, run_id, code, person, reason, note, parent_run_id, state, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'intent', ?) ON CONFLICT DO NOTHING",
                [pause_id, run_id, code, person, reason, note, parent_run_id, now()])
        return self.pause(pause_id) if cur.rowcount == 1 else None

    def pause(self, pause_id: str) -> Pause:
        return _pause(self._get("pauses", pause_id, "pause"))

    def open_pauses(self, run_ids: list[str] | None = None) -> list[Pause]:
        """Pauses not yet applied, oldest first (a parent's before the children it reached);
        with `run_ids`, only those of these runs."""
        where = f"state IN ({', '.join('?' for _ in OPEN_PAUSE_STATES)})"
        params: list[Any] = list(OPEN_PAUSE_STATES)
        if run_ids is not None:
            where += f" AND run_id IN ({', '.join('?' for _ in run_ids)})" if run_ids else " AND 0"
            params += run_ids
        with self._lock:
            return [_pause(dict(r)) for r in self._t("pauses").rows_where(where, params, order_by="created_at, rowid")]

    def pause_recorded(self, pause_id: str) -> None:
        with self._lock:
            self.db.execute("UPDATE pauses SET state = 'recorded' WHERE pause_id = ? AND state = 'intent'", [pause_id])

    def drop_pause(self, pause_id: str) -> None:
        """A pause the checkpoint did not record: it never happened."""
        with self._lock:
            self.db.execute("DELETE FROM pauses WHERE pause_id = ? AND state = 'intent'", [pause_id])

    def pause_below(self, run_id: str, person: str, note: str) -> list[Pause]:
        """A `parent_paused` intent for every active run below `run_id`, reached through runs paused
        for their own reason (they keep it) but not through an active one: its own pause, once
        applied, reaches further. A run with a pause under way gets no second one."""
        added: list[Pause] = []
        with self._lock:
            above = [run_id]
            while above:
                for child in self.children(above.pop()):
                    if child.status in TERMINAL:
                        continue
                    if child.status not in PAUSABLE:
                        above.append(child.run_id)
                        continue
                    parent = child.parent_run_id
                    why = f"paused with its parent run {parent} by {person}" + (f": {note}" if note else "")
                    pause = self.add_pause(child.run_id, PARENT_PAUSED, person, why, note, parent_run_id=parent)
                    if pause is not None:
                        added.append(pause)
        return added

    def void_open_pauses(self, run_id: str) -> None:
        with self._lock:
            self.db.execute(f"UPDATE pauses SET state = 'void' WHERE run_id = ? AND state IN "
                            f"({', '.join('?' for _ in OPEN_PAUSE_STATES)})", [run_id, *OPEN_PAUSE_STATES])

    def apply_pause(self, pause_id: str, /, **event: Any) -> tuple[bool, list[Pause]]:
        """Hold the pause's run (as `hold`), close the pause, and add a `parent_paused` intent for
        each of the run's children that is running or waiting, all in one transaction: a crash
        leaves either the pause open or the run held with its children's pauses to do. Returns
        whether the run was held (False: it had paused or ended, the pause is void) and the
        children's pauses. A pause already closed changes nothing."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                p = self.pause(pause_id)
                if p.state not in OPEN_PAUSE_STATES:
                    self.db.execute("ROLLBACK")
                    return False, []
                extra = {"parent_run_id": p.parent_run_id} if p.parent_run_id else {}
                moved = self._hold(p.run_id, p.code, p.reason, p.person, **extra, **event)
                self.db.execute("UPDATE pauses SET state = ? WHERE pause_id = ?",
                                ["applied" if moved else "void", pause_id])
                below = self.pause_below(p.run_id, p.person, p.note) if moved else []
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            self.changed.notify_all()
            return moved, below

    def wait_for_child(self, run_id: str, call_pk: int, reason: str) -> bool:
        """A running run starts waiting for its child, only while the call still waits for it:
        once the child's outcome is in the call, the run must go on instead."""
        with self._lock:
            cur = self.db.execute(
                "UPDATE runs SET status = ?, code = ?, reason = ?, updated_at = ? WHERE run_id = ? AND status = ? "
                "AND EXISTS (SELECT 1 FROM calls WHERE id = ? AND status = 'awaiting_child')",
                [AWAITING_CHILD, "awaiting_child", reason, now(), run_id, RUNNING, call_pk])
            self.changed.notify_all()
            return cur.rowcount == 1

    def add_to_run(self, run_id: str, **deltas: float) -> Run:
        """Add to counters in one statement, so no increment is lost between threads."""
        for k in deltas:
            if k not in RUN_COUNTERS:
                raise KeyError(k)
        sets = ", ".join(f"{k} = {k} + ?" for k in deltas)
        with self._lock:
            self.db.execute(f"UPDATE runs SET {sets}, updated_at = ? WHERE run_id = ?",
                            [*deltas.values(), now(), run_id])
        return self.run(run_id)

    def add_turn(self, run_id: str, **deltas: float) -> Run:
        """A model turn of a run: its own counters (`deltas`, as add_to_run) and, in the same
        transaction, one more turn below for every run above it (descendant_stretch_turns and
        descendant_total_turns), so each ancestor's turn ceilings bound its whole subtree."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                self.add_to_run(run_id, **deltas)
                self.db.execute(
                    "WITH RECURSIVE up(id) AS ("
                    " SELECT parent_run_id FROM runs WHERE run_id = ? AND parent_run_id != ''"
                    " UNION SELECT r.parent_run_id FROM runs r JOIN up ON r.run_id = up.id"
                    " WHERE r.parent_run_id != '') "
                    "UPDATE runs SET descendant_stretch_turns = descendant_stretch_turns + 1, "
                    "descendant_total_turns = descendant_total_turns + 1, updated_at = ? "
                    "WHERE run_id IN (SELECT id FROM up)", [run_id, now()])
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        return self.run(run_id)

    # -- goals ----------------------------------------------------------------------------

    def add_goal(self, run_id: str, goal: dict[str, Any], author: str) -> int:
        with self._lock:
            row = self.db.execute("SELECT COALESCE(MAX(version), 0) FROM goals WHERE run_id = ?", [run_id]).fetchone()
            version = int(row[0]) + 1
            self._t("goals").insert({"run_id": run_id, "version": version, "goal": json.dumps(goal),
                                     "author": author, "created_at": now()})
        return version

    def goal(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        with self._lock:
            if version is None:
                rows = list(self._t("goals").rows_where("run_id = ?", [run_id], order_by="version desc", limit=1))
            else:
                rows = list(self._t("goals").rows_where("run_id = ? AND version = ?", [run_id, version]))
        if not rows:
            raise RunStateError(f"run {run_id!r} has no goal", code="run_not_found")
        return json.loads(rows[0]["goal"])

    # -- events ---------------------------------------------------------------------------

    def append_event(self, run_id: str, kind: EventKind, /, **data: Any) -> int:
        """Append one event (its kind an EventKind) and return its seq."""
        with self._lock:
            cur = self.db.execute("INSERT INTO events (run_id, time, kind, data) VALUES (?, ?, ?, ?)",
                                  [run_id, now(), kind, json.dumps(data, default=str)])
            self.changed.notify_all()
            return int(cur.lastrowid or 0)

    def events(self, run_id: str | None = None, after_seq: int = 0, limit: int = 1000) -> list[Event]:
        with self._lock:
            if run_id:
                rows = self._t("events").rows_where("run_id = ? AND seq > ?", [run_id, after_seq],
                                                    order_by="seq", limit=limit)
            else:
                rows = self._t("events").rows_where("seq > ?", [after_seq], order_by="seq", limit=limit)
            return [Event(seq=r["seq"], run_id=r["run_id"], time=r["time"], kind=r["kind"], data=json.loads(r["data"]))
                    for r in rows]

    def follow(self, run_id: str, after_seq: int, stop: threading.Event, poll_seconds: float = 0.5,
               until_waiting: bool = False, final_grace_seconds: float = 30.0) -> Iterator[Event]:
        """Stored events after `after_seq`, then live ones until `stop`, or until the run has ended
        and its final event (`run_succeeded|failed|cancelled`) has been yielded (a cancel writes it
        last, after stopping what ran; a run a crash left without one is given up on after
        `final_grace_seconds`), or, with `until_waiting`, until it waits for a person."""
        ended_at: float | None = None
        final_seen = False
        while not stop.is_set():
            batch = self.events(run_id, after_seq)
            for e in batch:
                after_seq = e.seq
                final_seen = final_seen or e.kind in FINAL_EVENTS
                yield e
            if batch:
                continue
            if self.run(run_id).status in TERMINAL:
                for e in self.events(run_id, after_seq):  # written between the two reads above
                    after_seq = e.seq
                    final_seen = final_seen or e.kind in FINAL_EVENTS
                    yield e
                # A watch that starts after the final event (after_seq past it) has nothing to wait for.
                if final_seen or self._has_final_event(run_id):
                    return
                ended_at = ended_at if ended_at is not None else time.monotonic()
                if time.monotonic() - ended_at >= final_grace_seconds:
                    return
            elif until_waiting and self.waits_for_person(run_id):
                # The status was read after the events: a pause written in between has its event
                # stored by now (set_status_logged writes both at once), so one more read gets it.
                yield from self.events(run_id, after_seq)
                return
            with self.changed:
                self.changed.wait(poll_seconds)

    def _has_final_event(self, run_id: str) -> bool:
        with self._lock:
            row = self.db.execute(
                f"SELECT 1 FROM events WHERE run_id = ? AND kind IN ({', '.join('?' for _ in FINAL_EVENTS)}) LIMIT 1",
                [run_id, *FINAL_EVENTS]).fetchone()
        return row is not None

    def waits_for_person(self, run_id: str) -> bool:
        """Paused or awaiting approval, itself or through the child run it waits for."""
        run = self.run(run_id)
        if run.status in (PAUSED, AWAITING_APPROVAL):
            return True
        if run.status == AWAITING_CHILD:
            return any(self.waits_for_person(c.run_id) for c in self.children(run_id)
                       if c.status not in TERMINAL)
        return False

    # -- transcript -----------------------------------------------------------------------

    def add_transcript(self, run_id: str, entry: dict[str, Any]) -> None:
        with self._lock:
            self._t("transcript").insert({"run_id": run_id, "entry": json.dumps(entry, default=str)})

    def transcript(self, run_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [json.loads(r["entry"]) for r in self._t("transcript").rows_where("run_id = ?", [run_id],
                                                                                     order_by="id")]

    # -- calls ----------------------------------------------------------------------------

    def add_call(self, run_id: str, turn: int, idx: int, **fields: Any) -> int:
        row = {"run_id": run_id, "turn": turn, "idx": idx, "status": "pending", "result": "", "decision_id": "",
               "grant": b"", "verdict": "", "code": "", "approval_id": "", "child_run_id": "", "verifies": "",
               **fields}
        row["arguments"] = json.dumps(row.get("arguments", {}))
        with self._lock:
            return int(self._t("calls").insert(row).last_pk or 0)

    def calls(self, run_id: str, turn: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            if turn is None:
                rows = self._t("calls").rows_where("run_id = ?", [run_id], order_by="id")
            else:
                rows = self._t("calls").rows_where("run_id = ? AND turn = ?", [run_id, turn], order_by="idx")
            return [_call_row(r) for r in rows]

    def begin_final(self, run_id: str, turn: int, final: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """The model's final report and the driver's verification calls for it (added as calls of
        `turn`), in one transaction: after a crash either both are there or neither."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for idx, fields in enumerate(calls):
                    self.add_call(run_id, turn, idx, **fields)
                self.update_run(run_id, final=final)
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def update_call(self, call_pk: int, **fields: Any) -> None:
        if "result" in fields:
            fields["result"] = json.dumps(fields["result"])
        with self._lock:
            self._t("calls").update(call_pk, fields)

    def identical_calls(self, run_id: str, args_sha: str, tool: str, before_pk: int, from_turn: int = 0) -> int:
        """Earlier finished calls of the same tool with the same arguments, from `from_turn` on (the
        repetition breaker counts within a stretch: a resume starts it afresh)."""
        with self._lock:
            row = self.db.execute(
                "SELECT COUNT(*) FROM calls WHERE run_id = ? AND tool = ? AND args_sha = ? AND id < ? "
                "AND status = 'done' AND turn >= ?",
                [run_id, tool, args_sha, before_pk, from_turn]).fetchone()
        return int(row[0])

    # -- approvals ------------------------------------------------------------------------

    def add_approval(self, **fields: Any) -> str:
        approval_id = "apr-" + uuid.uuid4().hex[:12]
        row = {"approval_id": approval_id, "status": "pending", "decided_by": "", "decided_at": 0.0, "note": "",
               "created_at": now(), **fields}
        row["arguments"] = json.dumps(row.get("arguments", {}))
        with self._lock:
            self._t("approvals").insert(row)
        return approval_id

    def approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        clauses, params = [], []
        if run_id:
            clauses.append("run_id = ?")
            params.append(run_id)
        if status:
            clauses.append("status = ?")
            params.append(status)
        with self._lock:
            rows = self._t("approvals").rows_where(" AND ".join(clauses) or None, params or None,
                                                   order_by="created_at")
            return [_approval(dict(r)) for r in rows]

    def approval(self, approval_id: str) -> Approval:
        return _approval(self._get("approvals", approval_id, "approval"))

    def decide_approval(self, approval_id: str, status: str, person: str, note: str = "",
                        token: str = "") -> Approval:
        with self._lock:
            current = self.approval(approval_id)
            if current.status != "pending":
                raise RunStateError(f"approval {approval_id} is already {current.status}",
                                    code="approval_not_pending")
            self._t("approvals").update(approval_id, {"status": status, "decided_by": person,
                                                      "decided_at": now(), "note": note, "token": token})
        return self.approval(approval_id)

    def settle_approval(self, approval_id: str, status: str) -> None:
        """An approved approval the driver has relayed once (`used`): never attached again."""
        with self._lock:
            self._t("approvals").update(approval_id, {"status": status})

    # -- receipts and spend ---------------------------------------------------------------

    def add_receipt(self, run_id: str, decision_id: str, tool: str, exit_code: int, code: str, output: str,
                    receipt: dict[str, Any], verifies: str = "") -> None:
        with self._lock:
            self._t("receipts").upsert({"decision_id": decision_id, "run_id": run_id, "tool": tool,
                                        "exit_code": exit_code, "code": code, "output": output,
                                        "receipt": json.dumps(receipt, default=str), "created_at": now(),
                                        "verifies": verifies},
                                       pk="decision_id")

    def receipts(self, run_id: str, *, work_only: bool = False) -> list[dict[str, Any]]:
        """This run's receipts, oldest first; `work_only`: not those of the driver's own
        verification calls (what the run's work produced)."""
        where = "run_id = ? AND verifies = ''" if work_only else "run_id = ?"
        with self._lock:
            return [dict(r) for r in self._t("receipts").rows_where(where, [run_id], order_by="created_at, rowid")]

    def receipt(self, decision_id: str) -> dict[str, Any] | None:
        with self._lock:
            rows = list(self._t("receipts").rows_where("decision_id = ?", [decision_id], limit=1))
        return dict(rows[0]) if rows else None

    def add_spend(self, run_id: str, owner: str, tenant: str, usd: float) -> None:
        if usd <= 0:
            return
        with self._lock:
            self._t("spend").insert({"day": today(), "owner": owner, "tenant": tenant, "run_id": run_id, "usd": usd})

    def spend_today(self, owner: str, tenant: str) -> tuple[float, float]:
        with self._lock:
            o, t = self.db.execute(
                "SELECT COALESCE(SUM(CASE WHEN owner = ? THEN usd END), 0), "
                "COALESCE(SUM(CASE WHEN tenant = ? THEN usd END), 0) FROM spend WHERE day = ?",
                [owner, tenant, today()]).fetchone()
        return float(o), float(t)

    def close(self) -> None:
        """Close the file; the store is not used after."""
        with self._lock:
            self.db.conn.close()
