"""The counts of the limits across runs on the PostgreSQL database every replica shares.

The same contract as the SQLite store (limit_store.py). The count is one upsert per limit, all in one
transaction: `INSERT ... ON CONFLICT DO UPDATE ... WHERE used + amount <= max`. The row's lock makes
a second replica's upsert wait for the first to commit and then re-read the row, so at max-1 exactly
one of them adds; the limits of one call are taken in one order (sorted), so two calls never wait on
each other's rows.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import psycopg

from checkpoint.server.limit_store import PRUNE_AFTER, PRUNE_EVERY, Bucket, Counted, Increment
from checkpoint.server.single_use_pg import _text
from warden.store.migrations import Schema
from warden.store.pg import Database

COUNTS = "checkpoint_limit_counts"

# Released scripts never change; a new version is a new script appended (warden/store/migrations.py).
SCHEMA = Schema("limits", (
    f"""
    CREATE TABLE {COUNTS} (
        limit_name text NOT NULL,
        key text NOT NULL,
        window_start bigint NOT NULL,
        until bigint NOT NULL,
        used bigint NOT NULL CHECK (used >= 0),
        PRIMARY KEY (limit_name, key, window_start)
    );
    CREATE INDEX {COUNTS}_until ON {COUNTS} (until);
    """,
))

_ADD = f"""INSERT INTO {COUNTS} AS c (limit_name, key, window_start, until, used) VALUES (%s, %s, %s, %s, %s)
    ON CONFLICT (limit_name, key, window_start) DO UPDATE SET used = c.used + EXCLUDED.used
    WHERE c.used + EXCLUDED.used <= %s RETURNING used"""


def _row(bucket: Bucket) -> tuple[str, str, int]:
    return _text(bucket.limit), _text(bucket.key), bucket.window_start


class PgLimits:
    """LimitStore on a shared PostgreSQL database; its failures raise StoreUnavailable."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._pruned = 0.0

    def used(self, buckets: Sequence[Bucket]) -> dict[Bucket, int]:
        wanted = list(dict.fromkeys(buckets))
        if not wanted:
            return {}
        by_row = {_row(b): b for b in wanted}
        marks = ",".join("(%s, %s, %s::bigint)" for _ in wanted)
        with self._db.connection() as conn:
            rows = conn.execute(
                f"SELECT limit_name, key, window_start, used FROM {COUNTS} WHERE (limit_name, key, window_start) "
                f"IN ({marks})", [v for r in by_row for v in r]).fetchall()
        return {by_row[(r[0], r[1], r[2])]: r[3] for r in rows}

    def count(self, increments: Sequence[Increment], now: int) -> Counted:
        ordered = sorted(increments)
        for inc in ordered:
            if inc.amount > inc.max:
                return Counted(inc.bucket, {})
        missed: Bucket | None = None
        totals: dict[Bucket, int] = {}
        with self._db.connection() as conn:
            with conn.transaction() as tx:
                for inc in ordered:
                    row = conn.execute(_ADD, (*_row(inc.bucket), inc.until, inc.amount, inc.max)).fetchone()
                    if row is None:
                        missed = inc.bucket
                        raise psycopg.Rollback(tx)
                    totals[inc.bucket] = row[0]
            if missed is None and time.monotonic() - self._pruned >= PRUNE_EVERY:
                self._pruned = time.monotonic()
                conn.execute(f"DELETE FROM {COUNTS} WHERE until < %s", (now - PRUNE_AFTER,))
        return Counted(missed, {} if missed else totals)

    def refund(self, increments: Sequence[Increment]) -> None:
        with self._db.transaction() as conn:
            for inc in sorted(increments):
                conn.execute(f"UPDATE {COUNTS} SET used = greatest(used - %s, 0) "
                             "WHERE limit_name = %s AND key = %s AND window_start = %s", (inc.amount, *_row(inc.bucket)))

    def close(self) -> None:
        pass  # the pool is the checkpoint's (stores.py closes it)
