"""The decision log on PostgreSQL: one table, one hash chain, every checkpoint replica appending.

Group commit, as in the SQLite log: `append` queues its record and waits; one writer thread per
process takes everything queued and writes it in one transaction, so one round trip to the
database is shared by every record that arrived while the previous one was in flight.

One chain for the whole fleet. Each transaction first takes a transaction-scoped advisory lock
(pg_schema.CHAIN_LOCK), then reads the head and links its records to it; the lock is released at
COMMIT, so the next writer, on whatever replica, reads a head that includes them. Records become
visible in seq order, so a follower that reads up to the head it saw never skips one.
docs/benchmarks.md ("One decision log for a fleet") measures this against one chain per writer.

Writable or not. A failed transaction (the database down, slower than the statement timeout, every
pooled connection busy) refuses every record in it with `AuditUnavailable`, so each caller denies
`audit_unavailable`, and marks the log unwritable; `on_writable` hears it (health goes NOT_SERVING).
A probe then asks the database every `probe_interval` seconds, and the log is writable again as
soon as it answers or a transaction commits: no restart is needed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Unpack

import psycopg

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.pg_query import HEAD_SQL, INSERT_SQL
from checkpoint.audit.pg_reader import PgDecisionReader, empty_head
from checkpoint.audit.pg_schema import CHAIN_LOCK, PARTITION_SEQS, create_partition_sql, partition_of
from checkpoint.audit.record import GENESIS_HASH, DecisionRecord, record_hash, to_row
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import Anchor, VerifyReport
from checkpoint.audit.writable import Writability
from warden.store.errors import StoreError
from warden.store.pg import Database

log = logging.getLogger(__name__)
PROBE_INTERVAL = 1.0
# seconds a writer may sit idle inside its transaction, holding the chain's lock, before the
# database ends its session: far above the few ms of hashing a batch takes
LOCK_IDLE_TIMEOUT = 2.0


class _Batch:
    """Records waiting for the same transaction, and one parked lock per waiting caller."""

    __slots__ = ("rows", "waiters", "first_seq", "error")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.waiters: list[threading.Lock] = []
        self.first_seq = 0
        self.error: BaseException | None = None

    def add(self, row: tuple[Any, ...]) -> tuple[int, threading.Lock]:
        waiter = threading.Lock()
        waiter.acquire()
        self.rows.append(row)
        self.waiters.append(waiter)
        return len(self.rows) - 1, waiter

    def finish(self) -> None:
        for waiter in self.waiters:
            waiter.release()


class PgDecisionLog:
    """The decision log in the PostgreSQL store `db`, whose `decisions` schema is current.

    `path`: the local file the log is known by in the data folder (signed heads and the
    head-signing key live next to it); nothing is written to it. `read_db`: a pool of its own for
    reads (queries, followers, statistics), so that however many readers there are, the writer's
    connection is never among those they hold; default `db`. `owns_db`: `close` closes both.
    `lock_idle_timeout`: seconds a stalled writer may hold the chain's lock (LOCK_IDLE_TIMEOUT)."""

    def __init__(self, db: Database, *, path: str | Path = "decisions.db", append_timeout: float = 10.0,
                 probe_interval: float = PROBE_INTERVAL, partition_seqs: int = PARTITION_SEQS,
                 read_db: Database | None = None, owns_db: bool = False,
                 lock_idle_timeout: float = LOCK_IDLE_TIMEOUT) -> None:
        self.db = db
        self._owns_db = owns_db
        self.path = Path(path)
        self._read_db = read_db
        self._reader = PgDecisionReader(read_db or db)
        self._append_timeout = append_timeout
        self._partition_seqs = partition_seqs
        self.lock_idle_timeout = lock_idle_timeout
        self._covered = 0  # partitions exist for every seq up to this one (as far as this writer knows)
        self._writability = Writability(f"decision log on {db.url.shown}", db.ping, probe_interval, log)

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._pending = _Batch()
        self._closing = False
        self._writer_alive = True
        self._writing = 0
        self._committed = threading.Condition()  # followers in this process wait here for commits
        self._committed_seq = 0
        self._batches = self._records = self._failures = 0
        self._writer = threading.Thread(target=self._run, name="decision-log-writer", daemon=True)
        self._writer.start()

    # -- writing ---------------------------------------------------------------------------

    def append(self, record: DecisionRecord | Mapping[str, Any], *, timeout: float | None = None) -> int:
        """Record one decision; return its seq once it is committed. `InvalidAuditRecord` for a
        malformed record, `AuditUnavailable` when it was not committed (or not within `timeout`):
        either way the caller must deny."""
        row = to_row(record)  # a NUL, which PostgreSQL's text cannot hold, is U+FFFD by now (record.py)
        with self._lock:
            if self._closing or not self._writer_alive:
                raise AuditUnavailable("decision log is closed")
            batch = self._pending
            index, waiter = batch.add(row)
            if index == 0:
                self._work.notify()
        if not waiter.acquire(timeout=self._append_timeout if timeout is None else timeout):
            raise AuditUnavailable("decision log write timed out")
        if batch.error is not None:
            raise AuditUnavailable(str(batch.error)) from batch.error
        return batch.first_seq + index

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while not (self._pending.rows or self._closing):
                        self._work.wait()
                    batch = self._pending
                    if not batch.rows:
                        return  # closing, and everything queued is written
                    self._pending = _Batch()
                    self._writing = len(batch.rows)
                try:
                    batch.first_seq = self._commit(batch.rows)
                except AuditUnavailable as exc:
                    batch.error = exc
                except BaseException as exc:
                    # whatever else went wrong, these records were not committed: their callers
                    # answer audit_unavailable, never an ALLOW on a seq that does not exist
                    batch.error = AuditUnavailable(f"decision log writer failed: {type(exc).__name__}")
                    raise
                finally:
                    batch.finish()
                    with self._lock:
                        self._writing = 0
                    with self._committed:
                        self._committed.notify_all()
        except BaseException:
            log.exception("decision log writer stopped")
            raise
        finally:
            with self._lock:
                self._writer_alive = False
                leftover, self._pending = self._pending, _Batch()
            if leftover.rows:
                leftover.error = AuditUnavailable("decision log writer stopped")
                leftover.finish()
            with self._committed:
                self._committed.notify_all()

    def _commit(self, batch: list[tuple[Any, ...]]) -> int:
        """Chain and insert `batch` in one transaction, under the chain's lock; the first seq."""
        try:
            with self.db.connection() as conn:
                try:
                    last_seq, first_seq = self.chain_rows(conn, batch)
                except BaseException:
                    with contextlib.suppress(psycopg.Error):
                        conn.rollback()
                    raise
        except (StoreError, psycopg.Error) as exc:
            self._covered = 0  # a partition made by the rolled-back transaction is gone again
            self._failures += 1
            self._writability.set(False)
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise AuditUnavailable(f"decision log: cannot commit to the store: {detail}") from exc
        self._batches += 1
        self._records += len(batch)
        self._committed_seq = last_seq
        self._writability.set(True)
        return first_seq

    def chain_rows(self, conn: psycopg.Connection[Any], batch: list[tuple[Any, ...]]) -> tuple[int, int]:
        """Link `batch` to the head and commit it in one transaction; (last, first) seq.

        Two round trips. The first is one message of the simple query protocol: BEGIN, the idle
        timeout, the lock and the head. Each statement of it takes its own snapshot (READ
        COMMITTED) when it starts, so the head is read after the lock is held and sees what the
        lock's previous holder committed; and it ends in ReadyForQuery, which is what arms the
        database's idle timeout (a pipeline's Sync does not: measured with PostgreSQL 15 and
        psycopg 3.3). The second is a pipeline: the inserts and COMMIT."""
        with psycopg.ClientCursor(conn) as start:
            # a writer that stalls holding the lock (stopped, swapping, cut off) would hold every
            # replica's records back: the database ends its session, and so its lock, after this long
            start.execute(f"BEGIN; SET LOCAL idle_in_transaction_session_timeout = "
                          f"{int(self.lock_idle_timeout * 1000)}; SELECT pg_advisory_xact_lock({CHAIN_LOCK}); "
                          f"{HEAD_SQL}".encode())
            while start.nextset():  # BEGIN, SET and the lock answer first: the head is the last result
                pass
            head = start.fetchone()
        seq, prev = (int(head[0]), head[1]) if head else (0, GENESIS_HASH)
        first = seq + 1
        self._ensure_partitions(conn, first, seq + len(batch))
        rows = []
        for values in batch:
            seq += 1
            digest = record_hash(prev, (seq, *values))
            rows.append((seq, *values, prev, digest))
            prev = digest
        with conn.pipeline(), conn.cursor() as cursor:
            cursor.executemany(INSERT_SQL.encode(), rows)
            conn.execute("COMMIT")
        return seq, first

    def _ensure_partitions(self, conn: psycopg.Connection[Any], first: int, last: int) -> None:
        if last <= self._covered:
            return
        size = self._partition_seqs
        for number in range(partition_of(first, size), partition_of(last, size) + 1):
            conn.execute(create_partition_sql(number, size).encode())
        self._covered = (partition_of(last, size) + 1) * size

    # -- writable or not -------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        return self._writability.writable

    def on_writable(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(writable)` now and at every change from now on."""
        self._writability.listen(callback)

    # -- life ------------------------------------------------------------------------------

    def close(self, timeout: float | None = 30.0) -> None:
        """Write everything queued, stop the writer; close the pool when the log owns it."""
        with self._lock:
            self._closing = True
            self._work.notify()
        self._writability.stop()
        self._writer.join(timeout)
        if self._owns_db and not self._writer.is_alive():
            self._owns_db = False
            self.db.close()
            if self._read_db is not None:
                self._read_db.close()

    def __enter__(self) -> PgDecisionLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closing or not self._writer_alive

    def stats(self) -> dict[str, int]:
        with self._lock:
            queued = len(self._pending.rows)
        return {"queued": queued, "writing": self._writing, "committed_seq": self._committed_seq,
                "batches": self._batches, "records": self._records, "failures": self._failures}

    # -- reading ---------------------------------------------------------------------------

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the fleet's last committed record; (0, genesis) when empty."""
        return empty_head(self._reader.head())

    def read(self, after_seq: int = 0, *, limit: int | None = None, **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]:
        return self._reader.read(after_seq, limit=limit, **filters)

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]:
        return self._reader.tail(n, **filters)

    @property
    def stats_source(self) -> PgDecisionReader:
        """What the per-version statistics read (stats.AgentStats), the log being no SQLite file."""
        return self._reader

    def verify(self, *, expect_head: tuple[int, str] | None = None, anchors: Iterable[Anchor] = (),
               public_key: Any = None) -> VerifyReport:
        return self._reader.verify(expect_head=expect_head, anchors=anchors, public_key=public_key)

    def follow(self, after_seq: int = 0, *, stop_event: threading.Event | None = None, poll_interval: float = 0.5,
               **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]:
        """Stored records after `after_seq`, then new ones: this process's commits wake the follower
        at once, the other replicas' are read every `poll_interval`."""

        def wait(pos: int, timeout: float) -> None:
            with self._committed:
                if self._committed_seq <= pos and self._writer_alive:
                    self._committed.wait(timeout)

        return self._reader.follow(after_seq, stop_event=stop_event, poll_interval=poll_interval, wait=wait,
                                   ended=lambda: not self._writer_alive, **filters)

    def wake_followers(self) -> None:
        with self._committed:
            self._committed.notify_all()
