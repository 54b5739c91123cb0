"""The counts of the limits across runs (the Instance's `limits`): the interface, and its SQLite store.

A count is one row per (limit, key, window): the limit's name, whose calls it counts (`principal:ops`,
`tenant:acme`, ...) and the Unix second its window began. Windows are read from the decision time
(the checkpoint's clock, which tests inject), never from the database's: the service computes the
window and the store keeps what it is told.

`count` is the one write, and it is conditional in the database itself: an upsert that adds the
call's amount only where the sum stays within the max, for every limit the call counts in one
transaction, all or none. Two workers (or, on PostgreSQL, two replicas) that both read max-1 race to
that statement; exactly one adds. `refund` gives back what an allowed call counted when its answer
then turned into a refusal (an approval that could not be spent, a record that could not be
written): a refused call spends nothing.

`SqliteLimits` keeps `limits.db` in the data folder, shared by the workers of one folder
(`serve --workers N`); `limit_store_pg.PgLimits` keeps the table every replica of a fleet shares.
Every method may raise: the checkpoint refuses then (`limit_unavailable`), never allows.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

from warden.filelock import SharedLock

# rows of windows that ended this long ago are deleted, at most once per PRUNE_EVERY seconds per store
PRUNE_AFTER = 3600
PRUNE_EVERY = 600.0


class Bucket(NamedTuple):
    """One count: a limit's name, whose calls (`per:value`), and its window's first Unix second."""

    limit: str
    key: str
    window_start: int


class Increment(NamedTuple):
    bucket: Bucket
    amount: int  # units this call adds
    max: int  # the most the count may hold after it
    until: int  # the Unix second the window ends (the row may be deleted a while after)


class Counted(NamedTuple):
    """What `count` did: `missed` the bucket that had no room (nothing added), else None and each
    bucket's count after the call's amount was added."""

    missed: Bucket | None
    totals: dict[Bucket, int]


class LimitStore(Protocol):
    def used(self, buckets: Sequence[Bucket]) -> dict[Bucket, int]:
        """The count of each bucket (absent: 0)."""
        ...

    def count(self, increments: Sequence[Increment], now: int) -> Counted:
        """Add every increment, all or none (`Counted`). `now` (Unix seconds) only ages old rows out."""
        ...

    def refund(self, increments: Sequence[Increment]) -> None:
        """Give back what `count` added, never below zero."""
        ...

    def close(self) -> None: ...


LIMITS_FILE = "limits.db"
_CREATE = """CREATE TABLE IF NOT EXISTS counts (
    limit_name TEXT NOT NULL, key TEXT NOT NULL, window_start INTEGER NOT NULL,
    until INTEGER NOT NULL, used INTEGER NOT NULL,
    PRIMARY KEY (limit_name, key, window_start))"""
_ADD = """INSERT INTO counts (limit_name, key, window_start, until, used) VALUES (?, ?, ?, ?, ?)
    ON CONFLICT (limit_name, key, window_start) DO UPDATE SET used = counts.used + excluded.used
    WHERE counts.used + excluded.used <= ? RETURNING used"""


class SqliteLimits:
    """LimitStore in a SQLite file beside one checkpoint, its workers sharing the file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600))  # never readable by others
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=10)
        opening = SharedLock(f"{self.path}.lock")  # workers opening a new file together: one at a time
        try:
            with opening:
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute(_CREATE)
        finally:
            opening.close()
        self._lock = threading.Lock()
        self._pruned = 0.0

    def used(self, buckets: Sequence[Bucket]) -> dict[Bucket, int]:
        wanted = list(dict.fromkeys(buckets))
        if not wanted:
            return {}
        marks = ",".join("(?, ?, ?)" for _ in wanted)
        params = [v for b in wanted for v in b]
        with self._lock:
            rows = self._conn.execute(
                f"SELECT limit_name, key, window_start, used FROM counts WHERE (limit_name, key, window_start) "
                f"IN (VALUES {marks})", params).fetchall()
        return {Bucket(r[0], r[1], r[2]): r[3] for r in rows}

    def count(self, increments: Sequence[Increment], now: int) -> Counted:
        ordered = sorted(increments)
        for inc in ordered:
            if inc.amount > inc.max:  # a fresh row would take it: no window has room for it
                return Counted(inc.bucket, {})
        totals: dict[Bucket, int] = {}
        with self._lock:
            # BEGIN IMMEDIATE: the write lock first, so another worker's count waits instead of failing
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for inc in ordered:
                    row = self._conn.execute(_ADD, (*inc.bucket, inc.until, inc.amount, inc.max)).fetchone()
                    if row is None:
                        self._conn.execute("ROLLBACK")
                        return Counted(inc.bucket, {})
                    totals[inc.bucket] = row[0]
                self._prune(now)
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
        return Counted(None, totals)

    def refund(self, increments: Sequence[Increment]) -> None:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for inc in increments:
                    self._conn.execute(
                        "UPDATE counts SET used = max(used - ?, 0) WHERE limit_name = ? AND key = ? AND window_start = ?",
                        (inc.amount, *inc.bucket))
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise

    def _prune(self, now: int) -> None:
        if time.monotonic() - self._pruned < PRUNE_EVERY:
            return
        self._pruned = time.monotonic()
        self._conn.execute("DELETE FROM counts WHERE until < ?", (now - PRUNE_AFTER,))

    def close(self) -> None:
        with self._lock:
            self._conn.close()
