"""Receipts in SQLite: the record of every call that ran, and the idempotency key.

One row per decision id. A row is inserted as ``running`` before the container is created
(the claim), and completed with the serialized receipt when the call ends. So a grant can run
at most once, even across a crash: a row still ``running`` when the runner starts again belongs
to a call that was cut off, and becomes an ``interrupted`` receipt instead of running again.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import sqlite_utils

from warden.private import private_sqlite
from warden.toolrunner.v1 import toolrunner_pb2 as pb

RECEIPTS = "receipts"


class ReceiptStore:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        private_sqlite(self.path)
        # One connection shared by the server's threads, serialized by the lock: receipts are
        # written once per container, far below what one connection handles.
        conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db = sqlite_utils.Database(conn)
        self._table = sqlite_utils.db.Table(self._db, RECEIPTS)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._table.create(
                {
                    "decision_id": str,
                    "run_id": str,
                    "tool": str,
                    "state": str,
                    "code": str,
                    "claimed_at": float,
                    "finished_at": float,
                    "receipt": bytes,
                },
                pk="decision_id",
                not_null={"decision_id", "state"},
                if_not_exists=True,
            )
            self._table.create_index(["run_id"], if_not_exists=True)

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        """Record that this decision's call is starting; False when it was claimed before."""
        with self._lock:
            try:
                self._table.insert(
                    {
                        "decision_id": decision_id,
                        "run_id": run_id,
                        "tool": tool,
                        "state": "running",
                        "code": "",
                        "claimed_at": time.time(),
                    }
                )
            except sqlite3.IntegrityError:
                return False
            return True

    def finish(self, receipt: pb.Receipt) -> None:
        with self._lock:
            self._table.upsert(
                {
                    "decision_id": receipt.decision_id,
                    "run_id": receipt.run_id,
                    "tool": receipt.tool,
                    "state": "done",
                    "code": receipt.code,
                    "finished_at": time.time(),
                    "receipt": receipt.SerializeToString(),
                },
                pk="decision_id",
            )

    def get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
        """(state, receipt) for a decision id, or None when it never ran."""
        with self._lock:
            rows = list(
                self._db.query(
                    f"SELECT state, receipt FROM {RECEIPTS} WHERE decision_id = ?", [decision_id]
                )
            )
        if not rows:
            return None
        blob = rows[0]["receipt"]
        return rows[0]["state"], pb.Receipt.FromString(blob) if blob else None

    def mark_interrupted(self) -> int:
        """Turn claims left `running` by a previous process into `interrupted` receipts; returns
        how many."""
        return len(self.interrupt_cut_off())

    def interrupt_cut_off(self) -> list[str]:
        """mark_interrupted(), returning the decision ids of the calls it marked."""
        with self._lock:
            rows = list(
                self._db.query(f"SELECT decision_id, run_id, tool FROM {RECEIPTS} WHERE state = 'running'")
            )
        for row in rows:
            receipt = pb.Receipt(
                decision_id=row["decision_id"],
                run_id=row["run_id"],
                tool=row["tool"],
                exit_code=-1,
                code="interrupted",
            )
            self.finish(receipt)
        return [row["decision_id"] for row in rows]

    def close(self) -> None:
        with self._lock:
            self._db.conn.close()
