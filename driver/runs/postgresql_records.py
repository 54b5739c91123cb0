"""The driver's runs on a shared PostgreSQL store: its connections, and the rows kept beside each
run's state (goals, transcript, calls, approvals, receipts, spend). PostgresRunStore
(postgresql.py) adds the runs' state, their moves, the pauses and the event log.

A method that is part of a larger transaction (set_status_logged calls set_status and
append_event) runs on that transaction's connection: the thread's open transaction, if any, is
used by every statement below it, as the SQLite store's one connection is.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from driver.errors import RunStateError
from driver.runs.model import Approval, now, today
from driver.runs.postgresql_schema import APPROVAL_COLUMNS, q
from driver.runs.sqlite_schema import CALL_COLUMNS, RECEIPT_COLUMNS, approval_row, call_row
from warden.store.pg import Database

# pg_advisory_xact_lock(class, hashtext(run_id)): appends to one run's log (and its goal versions)
# are taken one at a time, so a run's events are numbered in the order they commit and a follower
# reading "after seq N" never skips one committed late (two-key locks: apart from the one-key
# locks of the runs being driven, postgresql.py)
_RUN_WRITES = 0x64727677  # "drvw"


def run_key(run_id: str) -> int:
    """A run's 64-bit advisory lock key (the run being driven)."""
    return int.from_bytes(hashlib.blake2b(run_id.encode(), digest_size=8).digest(), "big", signed=True)


def _cols(columns: dict[str, Any]) -> str:
    return ", ".join(q(c) for c in columns)


class PostgresRecords:
    def __init__(self, db: Database) -> None:
        self.db = db
        self._local = threading.local()

    # -- connections ----------------------------------------------------------------------

    @contextmanager
    def _conn(self) -> Iterator[psycopg.Connection[Any]]:
        """The thread's transaction if it has one open, else a pooled connection (autocommit)."""
        open_tx = getattr(self._local, "conn", None)
        if open_tx is not None:
            yield open_tx
            return
        with self.db.connection() as conn:
            yield conn

    @contextmanager
    def _tx(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction for the block and everything it calls; nested blocks join it."""
        if getattr(self._local, "conn", None) is not None:
            yield self._local.conn
            return
        with self.db.transaction() as conn:
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    def _rows(self, sql: str, params: Any = ()) -> list[dict[str, Any]]:
        with self._conn() as conn, conn.cursor(row_factory=dict_row) as cur:
            return list(cur.execute(sql, params).fetchall())

    def _one(self, sql: str, params: Any = ()) -> Any:
        with self._conn() as conn:
            return conn.execute(sql, params).fetchone()

    def _write(self, sql: str, params: Any = ()) -> int:
        """Run one statement; the rows it touched."""
        with self._conn() as conn:
            return conn.execute(sql, params).rowcount

    def _lock_run_writes(self, conn: psycopg.Connection[Any], run_id: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_RUN_WRITES, run_id))

    def _get(self, table: str, key: str, pk: str, value: str, what: str, columns: str = "*") -> dict[str, Any]:
        rows = self._rows(f"SELECT {columns} FROM {table} WHERE {q(key)} = %s", (value,))
        if not rows:
            raise RunStateError(f"no {what} {value!r}", code=f"{what}_not_found")
        return rows[0]

    def _insert(self, table: str, row: dict[str, Any], returning: str = "") -> Any:
        sql = (f"INSERT INTO {table} ({_cols(row)}) VALUES ({', '.join('%s' for _ in row)})"
               + (f" RETURNING {returning}" if returning else ""))
        with self._conn() as conn:
            cur = conn.execute(sql, list(row.values()))
            return cur.fetchone() if returning else None

    def _update(self, table: str, key: str, value: Any, fields: dict[str, Any]) -> int:
        sets = ", ".join(f"{q(k)} = %s" for k in fields)
        return self._write(f"UPDATE {table} SET {sets} WHERE {q(key)} = %s", [*fields.values(), value])

    # -- goals ----------------------------------------------------------------------------

    def add_goal(self, run_id: str, goal: dict[str, Any], author: str) -> int:
        with self._tx() as conn:
            self._lock_run_writes(conn, run_id)  # two drivers amending at once get two versions
            row = conn.execute(
                "INSERT INTO driver_goals (run_id, version, goal, author, created_at) "
                "SELECT %s, COALESCE(MAX(version), 0) + 1, %s, %s, %s FROM driver_goals WHERE run_id = %s "
                "RETURNING version", (run_id, json.dumps(goal), author, now(), run_id)).fetchone()
        return int(row[0])  # type: ignore[index]  # RETURNING of an INSERT always gives its row

    def goal(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        if version is None:
            row = self._one("SELECT goal FROM driver_goals WHERE run_id = %s ORDER BY version DESC LIMIT 1", (run_id,))
        else:
            row = self._one("SELECT goal FROM driver_goals WHERE run_id = %s AND version = %s", (run_id, version))
        if row is None:
            raise RunStateError(f"run {run_id!r} has no goal", code="run_not_found")
        return json.loads(row[0])

    # -- transcript -----------------------------------------------------------------------

    def add_transcript(self, run_id: str, entry: dict[str, Any]) -> None:
        self._insert("driver_transcript", {"run_id": run_id, "entry": json.dumps(entry, default=str)})

    def transcript(self, run_id: str) -> list[dict[str, Any]]:
        return [json.loads(r["entry"]) for r in
                self._rows("SELECT entry FROM driver_transcript WHERE run_id = %s ORDER BY id", (run_id,))]

    # -- calls ----------------------------------------------------------------------------

    def add_call(self, run_id: str, turn: int, idx: int, **fields: Any) -> int:
        row = {"run_id": run_id, "turn": turn, "idx": idx, "status": "pending", "result": "", "decision_id": "",
               "grant": b"", "verdict": "", "code": "", "approval_id": "", "child_run_id": "", "verifies": "",
               **fields}
        for k in row:
            if k not in CALL_COLUMNS or k == "id":
                raise KeyError(k)
        row["arguments"] = json.dumps(row.get("arguments", {}))
        return int(self._insert("driver_calls", row, returning="id")[0])

    def calls(self, run_id: str, turn: int | None = None) -> list[dict[str, Any]]:
        if turn is None:
            rows = self._rows("SELECT * FROM driver_calls WHERE run_id = %s ORDER BY id", (run_id,))
        else:
            rows = self._rows("SELECT * FROM driver_calls WHERE run_id = %s AND turn = %s ORDER BY idx", (run_id, turn))
        return [call_row(r) for r in rows]

    def call_for_child(self, child_run_id: str) -> dict[str, Any] | None:
        rows = self._rows("SELECT * FROM driver_calls WHERE child_run_id = %s ORDER BY id LIMIT 1", (child_run_id,))
        return call_row(rows[0]) if rows else None

    def update_call(self, call_pk: int, **fields: Any) -> None:
        if "result" in fields:
            fields["result"] = json.dumps(fields["result"])
        for k in fields:
            if k not in CALL_COLUMNS or k == "id":
                raise KeyError(k)
        if fields:
            self._update("driver_calls", "id", call_pk, fields)

    def identical_calls(self, run_id: str, args_sha: str, tool: str, before_pk: int, from_turn: int = 0) -> int:
        """Earlier finished calls of the same tool with the same arguments, from `from_turn` on."""
        row = self._one(
            "SELECT COUNT(*) FROM driver_calls WHERE run_id = %s AND tool = %s AND args_sha = %s AND id < %s "
            "AND status = 'done' AND turn >= %s", (run_id, tool, args_sha, before_pk, from_turn))
        return int(row[0])

    # -- approvals ------------------------------------------------------------------------

    def add_approval(self, **fields: Any) -> str:
        approval_id = "apr-" + uuid.uuid4().hex[:12]
        row = {"approval_id": approval_id, "status": "pending", "decided_by": "", "decided_at": 0.0, "note": "",
               "created_at": now(), "token": "", **fields}
        row["arguments"] = json.dumps(row.get("arguments", {}))
        self._insert("driver_approvals", row)
        return approval_id

    def approvals(self, run_id: str | None = None, status: str | None = None) -> list[Approval]:
        clauses, params = [], []
        if run_id:
            clauses.append("run_id = %s")
            params.append(run_id)
        if status:
            clauses.append("status = %s")
            params.append(status)
        where = " AND ".join(clauses) or "true"
        return [approval_row(r) for r in self._rows(
            f"SELECT {_cols(APPROVAL_COLUMNS)} FROM driver_approvals WHERE {where} ORDER BY created_at", params)]

    def approval(self, approval_id: str) -> Approval:
        return approval_row(self._get("driver_approvals", "approval_id", "approval_id", approval_id, "approval",
                                      _cols(APPROVAL_COLUMNS)))

    def decide_approval(self, approval_id: str, status: str, person: str, note: str = "",
                        token: str = "") -> Approval:
        """Decide a pending approval: one conditional update, so of two drivers deciding one
        approval at once exactly one does; the other gets `approval_not_pending`."""
        moved = self._write(
            "UPDATE driver_approvals SET status = %s, decided_by = %s, decided_at = %s, note = %s, token = %s "
            "WHERE approval_id = %s AND status = 'pending'", (status, person, now(), note, token, approval_id))
        current = self.approval(approval_id)
        if not moved:
            raise RunStateError(f"approval {approval_id} is already {current.status}", code="approval_not_pending")
        return current

    def settle_approval(self, approval_id: str, status: str) -> None:
        """An approved approval the driver has relayed once (`used`): never attached again."""
        self._write("UPDATE driver_approvals SET status = %s WHERE approval_id = %s", (status, approval_id))

    # -- receipts and spend ---------------------------------------------------------------

    def add_receipt(self, run_id: str, decision_id: str, tool: str, exit_code: int, code: str, output: str,
                    receipt: dict[str, Any], verifies: str = "") -> None:
        row = {"decision_id": decision_id, "run_id": run_id, "tool": tool, "exit_code": exit_code, "code": code,
               "output": output, "receipt": json.dumps(receipt, default=str), "created_at": now(),
               "verifies": verifies}
        sets = ", ".join(f"{q(k)} = EXCLUDED.{q(k)}" for k in row if k != "decision_id")
        self._write(f"INSERT INTO driver_receipts ({_cols(row)}) VALUES ({', '.join('%s' for _ in row)}) "
                    f"ON CONFLICT (decision_id) DO UPDATE SET {sets}", list(row.values()))

    def receipts(self, run_id: str, *, work_only: bool = False) -> list[dict[str, Any]]:
        """This run's receipts, oldest first; `work_only`: not those of the driver's own checks."""
        where = "run_id = %s AND verifies = ''" if work_only else "run_id = %s"
        return self._rows(f"SELECT {_cols(RECEIPT_COLUMNS)} FROM driver_receipts WHERE {where} "
                          "ORDER BY created_at, ord", (run_id,))

    def receipt(self, decision_id: str) -> dict[str, Any] | None:
        rows = self._rows(f"SELECT {_cols(RECEIPT_COLUMNS)} FROM driver_receipts WHERE decision_id = %s",
                          (decision_id,))
        return rows[0] if rows else None

    def add_spend(self, run_id: str, owner: str, tenant: str, usd: float) -> None:
        if usd <= 0:
            return
        self._insert("driver_spend", {"day": today(), "owner": owner, "tenant": tenant, "run_id": run_id, "usd": usd})

    def spend_today(self, owner: str, tenant: str) -> tuple[float, float]:
        """Today's spend of the owner and of the tenant, over every driver on the store."""
        o, t = self._one(
            "SELECT COALESCE(SUM(CASE WHEN owner = %s THEN usd END), 0), "
            "COALESCE(SUM(CASE WHEN tenant = %s THEN usd END), 0) FROM driver_spend WHERE day = %s",
            (owner, tenant, today()))
        return float(o), float(t)
