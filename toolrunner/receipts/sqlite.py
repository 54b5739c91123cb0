"""Receipts in a SQLite file beside the toolrunner: one machine, the embedded default.

One row per decision id. A row is inserted as ``running`` before the container is created
(the claim), and completed with the serialized receipt when the call ends. So a grant can run
at most once, even across a crash: a row still ``running`` when its instance starts again belongs
to a call that was cut off, and becomes an ``interrupted`` receipt instead of running again.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import sqlite_utils

from toolrunner.receipts.store import DONE, RUNNING, interrupted_receipt
from warden.private import private_sqlite
from warden.toolrunner.v1 import toolrunner_pb2 as pb

RECEIPTS = "receipts"


class SqliteReceipts:
    """The Receipts contract (toolrunner/receipts/store.py) in one SQLite file."""

    def __init__(self, path: str | Path, *, instance: str = ""):
        self.path = Path(path)
        self.instance = instance
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
                    "instance": str,
                },
                pk="decision_id",
                not_null={"decision_id", "state"},
                if_not_exists=True,
            )
            if "instance" not in self._table.columns_dict:
                # a file written before claims named their instance: its rows keep NULL, which
                # every instance treats as its own (what a runner did with every claim before)
                self._table.add_column("instance", str)
            self._table.create_index(["run_id"], if_not_exists=True)

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        with self._lock:
            try:
                self._table.insert(
                    {
                        "decision_id": decision_id,
                        "run_id": run_id,
                        "tool": tool,
                        "state": RUNNING,
                        "code": "",
                        "claimed_at": time.time(),
                        "instance": self.instance,
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
                    "state": DONE,
                    "code": receipt.code,
                    "finished_at": time.time(),
                    "receipt": receipt.SerializeToString(),
                },
                pk="decision_id",
            )

    def get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
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
        return len(self.interrupt_cut_off())

    def interrupt_cut_off(self) -> list[str]:
        with self._lock:
            rows = list(
                self._db.query(
                    f"SELECT decision_id, run_id, tool FROM {RECEIPTS} "
                    "WHERE state = ? AND (instance = ? OR instance IS NULL)",
                    [RUNNING, self.instance],
                )
            )
        for row in rows:
            self.finish(interrupted_receipt(row["decision_id"], row["run_id"], row["tool"]))
        return [row["decision_id"] for row in rows]

    def ping(self) -> bool:
        return True  # a file beside the process: nothing to reach

    def close(self) -> None:
        with self._lock:
            self._db.conn.close()
