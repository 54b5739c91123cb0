"""Receipts on the PostgreSQL store that a fleet of toolrunners shares.

The claim is one INSERT ... ON CONFLICT DO NOTHING on the decision id: whichever toolrunner's
insert lands first runs the call, every other one (a replay at a second toolrunner that holds the
same grant key, or the same grant sent to two at once) finds the claim taken. Each claim names its
instance; a toolrunner holds a session advisory lock on its instance name while it runs, so a
second live toolrunner given the same name stops at start instead of marking the first one's
calls interrupted. A lock whose session ended is noticed before the next claim, which is refused
until the health watch takes the name again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import psycopg

from toolrunner.receipts.store import DONE, RUNNING, interrupted_receipt
from warden.store.errors import StoreError, StoreUnavailable
from warden.store.migrations import Schema, require_current
from warden.store.pg import Database
from warden.store.url import StoreUrl
from warden.toolrunner.v1 import toolrunner_pb2 as pb

TABLE = "toolrunner_receipts"

SCHEMA = Schema("receipts", (
    f"""CREATE TABLE {TABLE} (
        decision_id text PRIMARY KEY,
        run_id text NOT NULL,
        tool text NOT NULL,
        instance text NOT NULL,
        state text NOT NULL CHECK (state IN ('{RUNNING}', '{DONE}')),
        code text NOT NULL DEFAULT '',
        claimed_at timestamptz NOT NULL DEFAULT now(),
        finished_at timestamptz,
        receipt bytea
    );
    CREATE INDEX {TABLE}_run ON {TABLE} (run_id);
    CREATE INDEX {TABLE}_running ON {TABLE} (instance) WHERE state = '{RUNNING}'""",
))

log = logging.getLogger(__name__)

_INSTANCE_LOCK = 0x74727563  # first key of the instance's advisory lock ("truc"); the second hashes its name


class InstanceInUse(StoreError):
    """Another live toolrunner runs under this instance name."""

    code = "instance_in_use"


class PostgresReceipts:
    """The Receipts contract (toolrunner/receipts/store.py) in the shared PostgreSQL store."""

    def __init__(self, db: Database, *, instance: str, lock: InstanceLock | None = None):
        if not instance:
            raise ValueError("a toolrunner on a shared store needs an instance name")
        self.db = db
        self.instance = instance
        self.lock = lock  # the instance's lock (open_postgresql); None: a test's store, no name held

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
        if self.lock is not None:  # a name this toolrunner may not hold claims nothing
            self.lock.require()
        with self.db.connection() as conn:
            row = conn.execute(
                f"INSERT INTO {TABLE} (decision_id, run_id, tool, instance, state) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (decision_id) DO NOTHING RETURNING 1",
                (decision_id, run_id, tool, self.instance, RUNNING),
            ).fetchone()
        return row is not None

    def finish(self, receipt: pb.Receipt) -> None:
        with self.db.connection() as conn:
            self._finish(conn, receipt)

    def _finish(self, conn, receipt: pb.Receipt) -> None:  # type: ignore[no-untyped-def]
        conn.execute(
            f"INSERT INTO {TABLE} (decision_id, run_id, tool, instance, state, code, finished_at, receipt) "
            "VALUES (%s, %s, %s, %s, %s, %s, now(), %s) ON CONFLICT (decision_id) DO UPDATE SET "
            "state = EXCLUDED.state, code = EXCLUDED.code, finished_at = EXCLUDED.finished_at, "
            "receipt = EXCLUDED.receipt",
            (receipt.decision_id, receipt.run_id, receipt.tool, self.instance, DONE, receipt.code,
             receipt.SerializeToString()),
        )

    def get(self, decision_id: str) -> tuple[str, pb.Receipt | None] | None:
        with self.db.connection() as conn:
            row = conn.execute(f"SELECT state, receipt FROM {TABLE} WHERE decision_id = %s", (decision_id,)).fetchone()
        if row is None:
            return None
        state, blob = row
        return state, pb.Receipt.FromString(bytes(blob)) if blob else None

    def interrupt_cut_off(self) -> list[str]:
        with self.db.transaction() as conn:
            rows = conn.execute(
                f"SELECT decision_id, run_id, tool FROM {TABLE} WHERE instance = %s AND state = %s FOR UPDATE",
                (self.instance, RUNNING),
            ).fetchall()
            for decision_id, run_id, tool in rows:
                self._finish(conn, interrupted_receipt(decision_id, run_id, tool))
        return [row[0] for row in rows]

    def mark_interrupted(self) -> int:
        return len(self.interrupt_cut_off())

    def ping(self) -> bool:
        """The database answers, and this toolrunner holds its name (taken again here when lost)."""
        return self.db.ping() and (self.lock is None or self.lock.check())

    def close(self) -> None:
        self.db.close()


class InstanceLock:
    """A session advisory lock on the instance name, held on a connection of its own (outside any
    pool) for as long as the toolrunner runs; the database releases it when that connection ends,
    however it ends. Such an end (a PostgreSQL restart, pg_terminate_backend) is noticed: `require`
    looks at the lock before each claim and refuses while it is lost, and `check` (the health
    watch's ping) takes it again once the name is free, so two toolrunners never claim under one
    name, and a toolrunner whose lock came back serves again without a restart."""

    def __init__(self, url: StoreUrl, instance: str):
        self.instance = instance
        self._db = Database(url, name="toolrunner-instance", max_size=1)  # its pool is never opened
        self._conn: psycopg.Connection[Any] | None = None
        self._mutex = threading.Lock()  # one statement at a time on the one connection

    def take(self) -> InstanceLock:
        """Take the name at start: InstanceInUse when a live toolrunner holds it."""
        with self._mutex:
            if not self._take():
                raise InstanceInUse(
                    f"toolrunner instance {self.instance!r} is running elsewhere on {self._db.url.shown}: give each "
                    "toolrunner its own --instance (a toolrunner that was just killed frees its name when the "
                    "database notices its connection is gone)"
                )
        return self

    def require(self) -> None:
        """Before a claim: StoreUnavailable unless the lock is held now."""
        with self._mutex:
            if self._conn is not None and self._alive():
                return
        raise StoreUnavailable(f"toolrunner instance {self.instance!r} lost its lock on {self._db.url.shown} "
                               "(its connection ended); no call is claimed until it is taken again")

    def check(self) -> bool:
        """Whether the lock is held, taking it again when it was lost and the name is free (health)."""
        with self._mutex:
            if self._conn is not None and self._alive():
                return True
            try:
                if self._take():
                    log.warning("toolrunner instance %r: its lock is held again", self.instance)
                    return True
                log.error("toolrunner instance %r: its lock was lost and another toolrunner now holds the name",
                          self.instance)
            except StoreUnavailable as exc:
                log.debug("toolrunner instance %r: its lock cannot be taken yet: %s", self.instance, exc)
            return False

    def _alive(self) -> bool:
        """Whether the lock's own connection still holds it (asked over that connection: a dead one fails)."""
        assert self._conn is not None
        try:
            row = self._conn.execute(
                "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND pid = pg_backend_pid() AND classid = %s::oid AND objid = hashtext(%s)::oid)",
                (_INSTANCE_LOCK, self.instance)).fetchone()
        except psycopg.Error:
            row = None
        if row and row[0]:
            return True
        log.error("toolrunner instance %r: its lock is lost; claims are refused until it is taken again",
                  self.instance)
        self._drop()
        return False

    def _take(self) -> bool:
        """A new session and the lock on it: False (and no session kept) when another holds the name."""
        self._drop()
        conn = self._db.connect_alone()
        try:
            row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_INSTANCE_LOCK, self.instance)).fetchone()
        except psycopg.Error as exc:
            conn.close()
            raise StoreUnavailable(f"store {self._db.url.shown}: {str(exc).strip()[:200]}") from None
        if not row or not row[0]:
            conn.close()
            return False
        self._conn = conn
        return True

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass  # the connection is already gone, and the lock with it
            self._conn = None

    def release(self) -> None:
        with self._mutex:
            self._drop()


def open_postgresql(url: StoreUrl, *, instance: str) -> tuple[PostgresReceipts, InstanceLock]:
    """The receipts of `instance` on the store `url` names, after checking its schema and taking the
    instance's lock: StoreUnavailable, StoreSchemaMismatch or InstanceInUse stop the start."""
    db = Database(url, name="toolrunner").open()
    try:
        require_current(db, SCHEMA)
        lock = InstanceLock(url, instance).take()
    except BaseException:
        db.close()
        raise
    return PostgresReceipts(db, instance=instance, lock=lock), lock
