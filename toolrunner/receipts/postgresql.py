"""Receipts on the PostgreSQL store that a fleet of toolrunners shares.

The claim is one INSERT ... ON CONFLICT DO NOTHING on the decision id: whichever toolrunner's
insert lands first runs the call, every other one (a replay at a second toolrunner that holds the
same grant key, or the same grant sent to two at once) finds the claim taken. Each claim names its
instance; a toolrunner holds a session advisory lock on its instance name while it runs, so a
second live toolrunner given the same name stops at start instead of marking the first one's
calls interrupted.
"""

from __future__ import annotations

from contextlib import ExitStack

from toolrunner.receipts.store import DONE, RUNNING, interrupted_receipt
from warden.store.errors import StoreError
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

_INSTANCE_LOCK = 0x74727563  # first key of the instance's advisory lock ("truc"); the second hashes its name


class InstanceInUse(StoreError):
    """Another live toolrunner runs under this instance name."""

    code = "instance_in_use"


class PostgresReceipts:
    """The Receipts contract (toolrunner/receipts/store.py) in the shared PostgreSQL store."""

    def __init__(self, db: Database, *, instance: str):
        if not instance:
            raise ValueError("a toolrunner on a shared store needs an instance name")
        self.db = db
        self.instance = instance

    def claim(self, decision_id: str, run_id: str, tool: str) -> bool:
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
        return self.db.ping()

    def close(self) -> None:
        self.db.close()


class InstanceLock:
    """A session advisory lock on the instance name, held on a connection of its own for as long
    as the toolrunner runs; the database releases it when that connection ends, however it ends."""

    def __init__(self, url: StoreUrl, instance: str):
        self.instance = instance
        self._db = Database(url, name="toolrunner-instance", max_size=1)
        self._held = ExitStack()

    def take(self) -> InstanceLock:
        self._db.open()
        try:
            conn = self._held.enter_context(self._db.connection())
            row = conn.execute("SELECT pg_try_advisory_lock(%s, hashtext(%s))", (_INSTANCE_LOCK, self.instance)).fetchone()
            if not row or not row[0]:
                raise InstanceInUse(
                    f"toolrunner instance {self.instance!r} is running elsewhere on {self._db.url.shown}: give each "
                    "toolrunner its own --instance (a toolrunner that was just killed frees its name when the "
                    "database notices its connection is gone)"
                )
        except BaseException:
            self.release()
            raise
        return self

    def release(self) -> None:
        try:
            self._held.close()
        except StoreError:
            pass  # the connection is already gone, and the lock with it
        self._db.close()


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
    return PostgresReceipts(db, instance=instance), lock
