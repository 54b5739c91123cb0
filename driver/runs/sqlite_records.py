"""The SQLite file of the driver's runs, and the rows kept beside each run's state: its goals, the
model-visible transcript, its calls, the approvals it waits for, the toolrunner's receipts and
the spend of its model calls. SqliteRunStore (sqlite.py) adds the runs' state and its moves."""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from pathlib import Path
from typing import Any

import sqlite_utils

from driver.errors import RunStateError
from driver.runs.model import Approval, now, today
from driver.runs.sqlite_schema import approval_row, call_row, create
from warden.private import private_sqlite


class SqliteRecords:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        private_sqlite(self.path)
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self.db = sqlite_utils.Database(conn)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        create(self.db)

    def _t(self, name: str) -> sqlite_utils.db.Table:
        return self.db.table(name)

    def _get(self, table: str, pk: str, what: str) -> dict[str, Any]:
        """One row by primary key; a missing one is `<what>_not_found`."""
        with self._lock:
            try:
                return dict(self._t(table).get(pk))
            except sqlite_utils.db.NotFoundError:
                raise RunStateError(f"no {what} {pk!r}", code=f"{what}_not_found") from None


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
            return [call_row(r) for r in rows]


    def call_for_child(self, child_run_id: str) -> dict[str, Any] | None:
        with self._lock:
            rows = list(self._t("calls").rows_where("child_run_id = ?", [child_run_id], limit=1))
        return call_row(rows[0]) if rows else None


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
            return [approval_row(dict(r)) for r in rows]

    def approval(self, approval_id: str) -> Approval:
        return approval_row(self._get("approvals", approval_id, "approval"))

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

