"""Single use, enforced by a unique key: an approval is honoured once, whatever the concurrency.

A check followed by a write lets two threads (or two checkpoint processes on one data folder)
both see "unused" and both answer ALLOW. Here the claim *is* the write: an INSERT into a table
whose primary key is the approved decision's id either succeeds, for exactly one caller, or
fails. The claim is taken before the decision is recorded, so a record that then fails to write
leaves the approval spent and the call denied: the safe direction.

A run's end is a one-way step of the same kind: `end_run` INSERTs the run's id into `ended_runs`
(the first end stays, later ones change nothing), and `ended` asks for the run and its
ancestors by key. Every worker on the data folder opens this file, so the answer to a cancel
binds each of them from then on, with no cache to go stale.

`SingleUseStore` is what the checkpoint asks of such a store; `SingleUse` here keeps it in a SQLite
file beside the process, `single_use_pg.PgSingleUse` in the PostgreSQL database a fleet of replicas
shares (docs/fleet.md). Every method may raise: callers refuse then, never allow.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from checkpoint.audit.record import now
from warden.filelock import SharedLock


class SingleUseStore(Protocol):
    """Keys taken once (an approval's decision id, an act id) and runs that ended, for good."""

    def claim(self, key: str, used_by: str) -> str | None:
        """None when this caller now holds `key`; otherwise who used it first."""
        ...

    def release(self, key: str, used_by: str) -> None:
        """Give back a key this caller claimed for something that then did not happen."""
        ...

    def used_by(self, key: str) -> str | None:
        """Who holds `key`, or None."""
        ...

    def end_run(self, run_id: str, how: str) -> None:
        """Mark `run_id` ended; the first end stays."""
        ...

    def ended(self, run_ids: Sequence[str]) -> tuple[str, str] | None:
        """(run id, how it ended) for one of `run_ids` that ended, else None; raises when it cannot tell."""
        ...

    def close(self) -> None: ...


class SingleUse:
    """The SQLite single-use store (`approvals-used.db`), shared by the workers of one data folder."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)  # never readable by others
        os.close(fd)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        # workers opening a new file together race to make the table and switch to WAL, which SQLite
        # answers "database is locked" without waiting: one at a time
        opening = SharedLock(f"{self.path}.lock")
        try:
            with opening:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS used (key TEXT PRIMARY KEY, used_by TEXT NOT NULL, at TEXT NOT NULL)"
                )
                self._conn.execute(
                    "CREATE TABLE IF NOT EXISTS ended_runs (run_id TEXT PRIMARY KEY, how TEXT NOT NULL, at TEXT NOT NULL)"
                )
        finally:
            opening.close()
        self._lock = threading.Lock()

    def claim(self, key: str, used_by: str) -> str | None:
        """None when this caller now holds `key`; otherwise who used it first."""
        with self._lock:
            try:
                self._conn.execute("INSERT INTO used (key, used_by, at) VALUES (?, ?, ?)", (key, used_by, now()))
                return None
            except sqlite3.IntegrityError:
                row = self._conn.execute("SELECT used_by FROM used WHERE key = ?", (key,)).fetchone()
                return row[0] if row else "another decision"

    def release(self, key: str, used_by: str) -> None:
        """Give back a key this caller claimed for something that then did not happen (its
        record could not be written), so the same thing may be asked for again."""
        with self._lock:
            self._conn.execute("DELETE FROM used WHERE key = ? AND used_by = ?", (key, used_by))

    def used_by(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT used_by FROM used WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def end_run(self, run_id: str, how: str) -> None:
        """Mark `run_id` ended, for good: a run that ended once stays ended, however it is said after."""
        with self._lock:
            self._conn.execute("INSERT INTO ended_runs (run_id, how, at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                               (run_id, how, now()))

    def ended(self, run_ids: Sequence[str]) -> tuple[str, str] | None:
        """(run id, how it ended) for one of `run_ids` that ended, else None."""
        ids = [r for r in dict.fromkeys(run_ids) if r]
        if not ids:
            return None
        with self._lock:
            row = self._conn.execute(
                f"SELECT run_id, how FROM ended_runs WHERE run_id IN ({','.join('?' * len(ids))}) LIMIT 1", ids
            ).fetchone()
        return (row[0], row[1]) if row else None

    def close(self) -> None:
        with self._lock:
            self._conn.close()
