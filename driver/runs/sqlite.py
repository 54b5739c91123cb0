"""The SQLite run store: everything the driver knows about its runs, in one file (the RunStore of
driver/runs/store.py; the only place in the driver that opens a database). The tables are in
sqlite_schema.py; the rows kept beside a run's state (goals, transcript, calls, approvals,
receipts, spend) in sqlite_records.py; here, the runs, their status moves, a person's pauses and
the event log.

Events are never updated or deleted. A driver that restarts reads runs back from here: a run that
was running is picked up where its last committed step left it. Every status move names the
status it moves from; a move and its event are one transaction.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from driver.runs.following import follow_events
from driver.runs.model import (
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
    Event,
    EventKind,
    Pause,
    Run,
    RunStatus,
    now,
    parent_pause_reason,
    pausable_below,
    settable,
    status_event,
    waits_for_person,
)
from driver.runs.sqlite_records import SqliteRecords
from driver.runs.sqlite_schema import RUN_COLUMNS, pause_row, run_row


class SqliteRunStore(SqliteRecords):
    """The RunStore of one SQLite file."""

    # -- runs -----------------------------------------------------------------------------

    def create_run(self, **fields: Any) -> Run:
        t = now()
        row: dict[str, Any] = {c: (0 if typ in (int, float) else "") for c, typ in RUN_COLUMNS.items()}
        # the checkpoint mints run ids (StartRun, or an allowed delegation): none is made up here
        row.update(run_id=fields.pop("run_id"), status=RUNNING,
                   created_at=t, updated_at=t, stretch_started_at=t, stretch=1, goal_version=1,
                   plan="null", missing="[]", provider_options="{}", budget="{}", delegates="[]")
        for k, v in fields.items():
            if k not in RUN_COLUMNS:
                raise KeyError(k)
            row[k] = json.dumps(v) if k in JSON_RUN_FIELDS else v
        row["root_run_id"] = row["root_run_id"] or row["run_id"]
        with self._lock:
            self._t("runs").insert(row)
        return self.run(row["run_id"])

    def run(self, run_id: str) -> Run:
        return run_row(self._get("runs", run_id, "run"))

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


    def update_run(self, run_id: str, **fields: Any) -> Run:
        """Set fields of a run (never its status: that moves only by the transitions below)."""
        settable(fields, RUN_COLUMNS)
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
        return pause_row(self._get("pauses", pause_id, "pause"))

    def open_pauses(self, run_ids: list[str] | None = None) -> list[Pause]:
        """Pauses not yet applied, oldest first (a parent's before the children it reached);
        with `run_ids`, only those of these runs."""
        where = f"state IN ({', '.join('?' for _ in OPEN_PAUSE_STATES)})"
        params: list[Any] = list(OPEN_PAUSE_STATES)
        if run_ids is not None:
            where += f" AND run_id IN ({', '.join('?' for _ in run_ids)})" if run_ids else " AND 0"
            params += run_ids
        with self._lock:
            return [pause_row(dict(r)) for r in self._t("pauses").rows_where(where, params, order_by="created_at, rowid")]

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
            for child in pausable_below(run_id, self.children):
                parent = child.parent_run_id
                why = parent_pause_reason(parent, person, note)
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
        """Stored events after `after_seq`, then live ones (following.py says until when)."""

        def wait(seconds: float) -> None:
            with self.changed:
                self.changed.wait(seconds)

        return follow_events(self, run_id, after_seq, stop, wait=wait, has_final_event=self._has_final_event,
                             poll_seconds=poll_seconds, until_waiting=until_waiting,
                             final_grace_seconds=final_grace_seconds)

    @contextmanager
    def driving(self, run_id: str) -> Iterator[bool]:
        """One driver per file: it drives every run (its workers keep one per run)."""
        yield True

    def still_driving(self, run_id: str) -> bool:
        return True

    @contextmanager
    def together(self) -> Iterator[None]:
        # One process writes this file and its writes nest transactions of their own; a crash
        # mid-block is continued by the same driver on restart (docs/fleet.md: not a fleet).
        yield

    def ping(self) -> bool:
        return True  # a file beside the process: nothing to lose touch with

    def _has_final_event(self, run_id: str) -> bool:
        with self._lock:
            row = self.db.execute(
                f"SELECT 1 FROM events WHERE run_id = ? AND kind IN ({', '.join('?' for _ in FINAL_EVENTS)}) LIMIT 1",
                [run_id, *FINAL_EVENTS]).fetchone()
        return row is not None

    def waits_for_person(self, run_id: str) -> bool:
        """Paused or awaiting approval, itself or through the child run it waits for."""
        return waits_for_person(self.run(run_id), self.children)


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

