"""The driver's runs on a PostgreSQL store that several drivers share: the RunStore of
driver/runs/store.py, as the SQLite store keeps it in one file (tables in postgresql_schema.py,
the rows beside a run's state in postgresql_records.py).

What keeps two drivers on one database apart:
- every status move is one conditional UPDATE naming the statuses it moves from, so of two
  drivers moving one run at once exactly one does (the other is told False); a move and its
  event, a pause and the hold it applies, a turn and its count in every run above are each one
  transaction;
- a pause is applied under its row's lock (SELECT ... FOR UPDATE), so two drivers applying one
  pause hold the run once;
- an approval is decided by a conditional UPDATE: one decision wins (postgresql_records.py);
- a driver drives a run only while it holds the run's session advisory lock (`driving`), on a
  connection of its own that the database drops, and the lock with it, when the driver dies;
- a run's events are appended one at a time (a transaction advisory lock per run), so their seq
  follows commit order and a follower never skips one; each append NOTIFYs the run id, which
  every driver's follower hears (a poll finds what a lost notification did not announce).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from driver.errors import RunStateError
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
from driver.runs.postgresql_notices import RunNotices
from driver.runs.postgresql_records import PostgresRecords, run_key
from driver.runs.postgresql_schema import CHANNEL, SCHEMA, q
from driver.runs.sqlite_schema import PAUSE_COLUMNS, RUN_COLUMNS, pause_row, run_row
from warden.store.errors import StoreUnavailable
from warden.store.migrations import require_current
from warden.store.pg import Database
from warden.store.url import StoreUrl, shown

__all__ = ["SCHEMA", "PostgresRunStore", "open_postgresql"]


_PAUSE_SELECT = "SELECT " + ", ".join(q(c) for c in PAUSE_COLUMNS) + " FROM driver_pauses"


def _in(values: tuple[str, ...] | list[str]) -> str:
    return ", ".join("%s" for _ in values)


class PostgresRunStore(PostgresRecords):
    """The RunStore of a PostgreSQL database; `db` is open and its `runs` schema current."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self._notices = RunNotices(db.url)
        self._held: dict[str, psycopg.Connection[Any]] = {}  # run id -> the connection holding its lock
        self._held_lock = threading.Lock()

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
        self._insert("driver_runs", row)
        return self.run(row["run_id"])

    def run(self, run_id: str) -> Run:
        return run_row(self._get("driver_runs", "run_id", "run_id", run_id, "run"))

    def runs(self, status: str | None = None, limit: int = 100, root_run_id: str = "",
             tenants: list[str] | None = None) -> list[Run]:
        """Newest first; with `root_run_id`, that delegation tree, oldest first; with `tenants`,
        only runs of those tenants (an empty list: none)."""
        clauses: list[str] = []
        params: list[Any] = []
        if tenants is not None:
            clauses.append("tenant = ANY(%s)")
            params.append(list(tenants))
        if status:
            clauses.append("status = %s")
            params.append(status)
        if root_run_id:
            clauses.append("(run_id = %s OR root_run_id = %s)")
            params += [root_run_id, root_run_id]
        order = "created_at, run_id" if root_run_id else "created_at DESC, run_id DESC"
        where = " AND ".join(clauses) or "true"
        rows = self._rows(f"SELECT * FROM driver_runs WHERE {where} ORDER BY {order} LIMIT %s", [*params, limit])
        return [run_row(r) for r in rows]

    def has_run(self, run_id: str) -> bool:
        return self._one("SELECT 1 FROM driver_runs WHERE run_id = %s", (run_id,)) is not None

    def children(self, run_id: str) -> list[Run]:
        """The runs this run delegated to, oldest first."""
        rows = self._rows("SELECT * FROM driver_runs WHERE parent_run_id = %s ORDER BY created_at, run_id", (run_id,))
        return [run_row(r) for r in rows]

    def tree(self, root_run_id: str) -> tuple[int, int]:
        """(runs, tokens) of a whole delegation tree, its root included."""
        row = self._one("SELECT COUNT(*), COALESCE(SUM(total_tokens), 0) FROM driver_runs "
                        "WHERE run_id = %s OR root_run_id = %s", (root_run_id, root_run_id))
        return int(row[0]), int(row[1])

    def update_run(self, run_id: str, **fields: Any) -> Run:
        """Set fields of a run (never its status: that moves only by the transitions below)."""
        settable(fields, RUN_COLUMNS)
        for k in JSON_RUN_FIELDS:
            if k in fields:
                fields[k] = json.dumps(fields[k])
        fields["updated_at"] = now()
        self._update("driver_runs", "run_id", run_id, fields)
        return self.run(run_id)

    def add_to_run(self, run_id: str, **deltas: float) -> Run:
        """Add to counters in one statement, so no increment is lost between drivers."""
        for k in deltas:
            if k not in RUN_COUNTERS:
                raise KeyError(k)
        sets = ", ".join(f"{q(k)} = {q(k)} + %s" for k in deltas)
        self._write(f"UPDATE driver_runs SET {sets}, updated_at = %s WHERE run_id = %s", [*deltas.values(), now(), run_id])
        return self.run(run_id)

    def add_turn(self, run_id: str, **deltas: float) -> Run:
        """A model turn: the run's counters and one more turn below for every run above it, at once."""
        with self._tx() as conn:
            self.add_to_run(run_id, **deltas)
            conn.execute(
                "WITH RECURSIVE up(id) AS ("
                " SELECT parent_run_id FROM driver_runs WHERE run_id = %s AND parent_run_id <> ''"
                " UNION SELECT r.parent_run_id FROM driver_runs r JOIN up ON r.run_id = up.id"
                " WHERE r.parent_run_id <> '') "
                "UPDATE driver_runs SET descendant_stretch_turns = descendant_stretch_turns + 1, "
                "descendant_total_turns = descendant_total_turns + 1, updated_at = %s "
                "WHERE run_id IN (SELECT id FROM up)", (run_id, now()))
        return self.run(run_id)

    # -- status moves ---------------------------------------------------------------------

    def _move(self, run_id: str, to: RunStatus, code: str, reason: str, where: str, params: list[Any],
              extra: str = "", extra_params: tuple[Any, ...] = ()) -> bool:
        with self._conn() as conn:
            moved = conn.execute(
                f"UPDATE driver_runs SET status = %s, code = %s, reason = %s{extra}, updated_at = %s "
                f"WHERE run_id = %s AND {where}", [to, code, reason, *extra_params, now(), run_id, *params],
            ).rowcount == 1
            if moved:
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, run_id))
        return moved

    def set_status(self, run_id: str, status: RunStatus, code: str, reason: str) -> bool:
        """Move a run that has not ended; False when it already ended (a cancel won the race)."""
        return self._move(run_id, status, code, reason, f"status NOT IN ({_in(TERMINAL)})", list(TERMINAL))

    def set_status_logged(self, run_id: str, status: RunStatus, code: str, reason: str, /, **event: Any) -> bool:
        """Move a run that has not ended and append its event `run_<status>`, in one transaction."""
        with self._tx():
            moved = self.set_status(run_id, status, code, reason)
            if moved:
                self.append_event(run_id, status_event(RunStatus(status)), code=code, reason=reason, **event)
        return moved

    def transition(self, run_id: str, frm: RunStatus, to: RunStatus, code: str, reason: str) -> bool:
        """Move a run from `frm` to `to`; False (and nothing changed) when it is not in `frm`."""
        return self._move(run_id, to, code, reason, "status = %s", [frm])

    def hold(self, run_id: str, code: str, reason: str, person: str, /, **event: Any) -> bool:
        """A person's pause: a run running or waiting moves to paused with its event, at once."""
        with self._tx():
            return self._hold(run_id, code, reason, person, **event)

    def _hold(self, run_id: str, code: str, reason: str, person: str, /, **event: Any) -> bool:
        moved = self._move(run_id, PAUSED, code, reason, f"status IN ({_in(PAUSABLE)})", list(PAUSABLE),
                           extra=", paused_by = %s", extra_params=(person,))
        if moved:
            self.append_event(run_id, EventKind.RUN_PAUSED, code=code, reason=reason, person=person, **event)
        return moved

    def wait_for_child(self, run_id: str, call_pk: int, reason: str) -> bool:
        """A running run starts waiting for its child, only while the call still waits for it."""
        return self._move(run_id, AWAITING_CHILD, "awaiting_child", reason,
                          "status = %s AND EXISTS (SELECT 1 FROM driver_calls WHERE id = %s "
                          "AND status = 'awaiting_child')", [RUNNING, call_pk])

    def waits_for_person(self, run_id: str) -> bool:
        """Paused or awaiting approval, itself or through the child run it waits for."""
        return waits_for_person(self.run(run_id), self.children)

    def begin_final(self, run_id: str, turn: int, final: dict[str, Any], calls: list[dict[str, Any]]) -> None:
        """The model's final report and its verification calls, in one transaction."""
        with self._tx():
            for idx, fields in enumerate(calls):
                self.add_call(run_id, turn, idx, **fields)
            self.update_run(run_id, final=final)

    # -- pauses ---------------------------------------------------------------------------

    def add_pause(self, run_id: str, code: str, person: str, reason: str, note: str = "",
                  parent_run_id: str = "") -> Pause | None:
        """A pause of `run_id` as an intent; None when the run already has one under way."""
        pause_id = "pause-" + uuid.uuid4().hex[:16]
        added = self._write(
            "INSERT INTO driver_pauses (pause_id, run_id, code, person, reason, note, parent_run_id, state, "
            "created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, 'intent', %s) ON CONFLICT DO NOTHING",
            (pause_id, run_id, code, person, reason, note, parent_run_id, now()))
        return self.pause(pause_id) if added == 1 else None

    def pause(self, pause_id: str) -> Pause:
        rows = self._rows(f"{_PAUSE_SELECT} WHERE pause_id = %s", (pause_id,))
        if not rows:
            raise RunStateError(f"no pause {pause_id!r}", code="pause_not_found")
        return pause_row(rows[0])

    def open_pauses(self, run_ids: list[str] | None = None) -> list[Pause]:
        """Pauses not yet applied, oldest first; with `run_ids`, only those of these runs."""
        where, params = f"state IN ({_in(OPEN_PAUSE_STATES)})", list[Any](OPEN_PAUSE_STATES)
        if run_ids is not None:
            where += " AND run_id = ANY(%s)"
            params.append(list(run_ids))
        return [pause_row(r) for r in self._rows(f"{_PAUSE_SELECT} WHERE {where} ORDER BY created_at, ord", params)]

    def pause_recorded(self, pause_id: str) -> None:
        self._write("UPDATE driver_pauses SET state = 'recorded' WHERE pause_id = %s AND state = 'intent'", (pause_id,))

    def drop_pause(self, pause_id: str) -> None:
        """A pause the checkpoint did not record: it never happened."""
        self._write("DELETE FROM driver_pauses WHERE pause_id = %s AND state = 'intent'", (pause_id,))

    def pause_below(self, run_id: str, person: str, note: str) -> list[Pause]:
        """A `parent_paused` intent for every active run below `run_id` (as the SQLite store)."""
        added: list[Pause] = []
        for child in pausable_below(run_id, self.children):
            parent = child.parent_run_id
            pause = self.add_pause(child.run_id, PARENT_PAUSED, person, parent_pause_reason(parent, person, note),
                                   note, parent_run_id=parent)
            if pause is not None:
                added.append(pause)
        return added

    def void_open_pauses(self, run_id: str) -> None:
        self._write(f"UPDATE driver_pauses SET state = 'void' WHERE run_id = %s AND state IN ({_in(OPEN_PAUSE_STATES)})",
                    [run_id, *OPEN_PAUSE_STATES])

    def apply_pause(self, pause_id: str, /, **event: Any) -> tuple[bool, list[Pause]]:
        """Hold the pause's run, close the pause and add its children's pauses, in one transaction
        under the pause's row lock: of two drivers applying one pause, the second finds it closed."""
        with self._tx() as conn:
            rows = conn.execute("SELECT state FROM driver_pauses WHERE pause_id = %s FOR UPDATE", (pause_id,)).fetchall()
            p = self.pause(pause_id)
            if not rows or p.state not in OPEN_PAUSE_STATES:
                return False, []
            extra = {"parent_run_id": p.parent_run_id} if p.parent_run_id else {}
            moved = self._hold(p.run_id, p.code, p.reason, p.person, **extra, **event)
            conn.execute("UPDATE driver_pauses SET state = %s WHERE pause_id = %s",
                         ("applied" if moved else "void", pause_id))
            below = self.pause_below(p.run_id, p.person, p.note) if moved else []
        return moved, below

    # -- events ---------------------------------------------------------------------------

    def append_event(self, run_id: str, kind: EventKind, /, **data: Any) -> int:
        """Append one event and return its seq; NOTIFY its run id when it commits."""
        payload = json.dumps(data, default=str)
        with self._tx() as conn:
            self._lock_run_writes(conn, run_id)
            row = conn.execute("INSERT INTO driver_events (run_id, time, kind, data) VALUES (%s, %s, %s, %s) "
                               "RETURNING seq", (run_id, now(), kind, payload)).fetchone()
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, run_id))
        return int(row[0])  # type: ignore[index]  # RETURNING of an INSERT always gives its row

    def events(self, run_id: str | None = None, after_seq: int = 0, limit: int = 1000) -> list[Event]:
        if run_id:
            rows = self._rows("SELECT seq, run_id, time, kind, data FROM driver_events WHERE run_id = %s AND seq > %s "
                              "ORDER BY seq LIMIT %s", (run_id, after_seq, limit))
        else:
            rows = self._rows("SELECT seq, run_id, time, kind, data FROM driver_events WHERE seq > %s "
                              "ORDER BY seq LIMIT %s", (after_seq, limit))
        return [Event(seq=r["seq"], run_id=r["run_id"], time=r["time"], kind=r["kind"], data=json.loads(r["data"]))
                for r in rows]

    def follow(self, run_id: str, after_seq: int, stop: threading.Event, poll_seconds: float = 0.5,
               until_waiting: bool = False, final_grace_seconds: float = 30.0) -> Iterator[Event]:
        """Stored events after `after_seq`, then live ones, whichever driver writes them: woken by
        the database's notifications, read again every `poll_seconds` all the same."""
        return follow_events(self, run_id, after_seq, stop, wait=self._notices.wait, has_final_event=self._has_final_event,
                             poll_seconds=poll_seconds, until_waiting=until_waiting,
                             final_grace_seconds=final_grace_seconds)

    def _has_final_event(self, run_id: str) -> bool:
        return self._one(f"SELECT 1 FROM driver_events WHERE run_id = %s AND kind IN ({_in(FINAL_EVENTS)}) LIMIT 1",
                         [run_id, *FINAL_EVENTS]) is not None

    # -- the runs a driver drives -----------------------------------------------------------

    @contextmanager
    def driving(self, run_id: str) -> Iterator[bool]:
        """Whether this driver may drive `run_id` now: True while it holds the run's advisory lock
        (on a connection of its own, so the lock goes when the driver's connection does), False
        when another driver holds it. StoreUnavailable when the database cannot be asked."""
        conn = self.db.connect_alone()
        try:
            try:
                row = conn.execute("SELECT pg_try_advisory_lock(%s)", (run_key(run_id),)).fetchone()
            except psycopg.Error as exc:
                raise _unavailable(self.db, exc) from None
            mine = bool(row and row[0])
            if mine:
                with self._held_lock:
                    self._held[run_id] = conn
            yield mine
        finally:
            with self._held_lock:
                if self._held.get(run_id) is conn:
                    del self._held[run_id]
            conn.close()  # the lock ends with its session

    def still_driving(self, run_id: str) -> bool:
        """Whether the lock `driving` took is still held: False once its connection is gone (the
        database restarted, or dropped it), for another driver may have taken the run since. A
        run not being driven through `driving` (a direct call) has nothing to lose: True."""
        with self._held_lock:
            conn = self._held.get(run_id)
        if conn is None:
            return True
        try:
            conn.execute("SELECT 1")
        except psycopg.Error:
            return False
        return True

    @contextmanager
    def together(self) -> Iterator[None]:
        """The block's writes in one transaction (nested store calls join it)."""
        with self._tx():
            yield

    def ping(self) -> bool:
        return self.db.ping()

    def close(self) -> None:
        """Stop listening and close the pool; the store is not used after."""
        self._notices.close()
        self.db.close()


def _unavailable(db: Database, exc: BaseException) -> StoreUnavailable:
    first_line = (shown(str(exc)).strip() or type(exc).__name__).splitlines()[0]
    return StoreUnavailable(f"store {db.url.shown}: {first_line}")


def open_postgresql(url: StoreUrl, *, name: str = "driver") -> PostgresRunStore:
    """The runs on the store `url` names, once its `runs` schema is current: StoreUnavailable or
    StoreSchemaMismatch (one line each) stop the start. `name` ends the sessions' application
    name (a durable driver's carries its executor id, so a judge can end them)."""
    db = Database(url, name=name).open()
    try:
        require_current(db, SCHEMA)
    except BaseException:
        db.close()
        raise
    return PostgresRunStore(db)
