"""The decision log: every decision appended, hash-chained, durably committed before it counts.

Group commit. ``append`` queues its record in the current batch and waits; one writer thread
takes the whole batch, chains and inserts it in one transaction, commits, and wakes every
waiter at once. One commit (the expensive part) is shared by every record that arrived while
the previous one was in flight, so throughput grows with concurrency.

Fast path. When nothing is queued and nothing is being written, the caller writes its own
record inline instead of handing it to the writer thread: the two thread handoffs would cost a
lone caller more than the commit itself (about 130 us against 50 us here). Both paths hold the
same `busy` flag, so exactly one transaction is ever in flight. As soon as callers overlap
(a record arrives while a transaction is in flight, or the last one held several records),
records queue and the writer thread batches them.

Chain consistency. The writer keeps the head (last seq and hash) it committed, and links the
next transaction to it, inserting explicit seqs: if anything else appended meanwhile (a second
writer on the same file), seq collides with the primary key, the transaction rolls back whole,
and it is retried once after reading the head under BEGIN IMMEDIATE. A failed transaction
forgets the kept head, so the next one reads it from what is committed, never from what was
hoped to be. That also makes a restart resume the chain with no extra step.

Several processes (`serve --workers N`). With ``shared=True`` every transaction first takes an
exclusive ``flock`` on ``<log>.write-lock`` and reads the head under it, so the workers' commits
take turns with no collision to roll back. A caller about to write inline takes it only if it is
free; otherwise its record goes to the writer thread, so its wait is bounded by the append timeout
even when the holder never lets go (a stopped worker). SQLite's own busy handler would serve too, but it
sleeps 1, 2, 5, 10... ms between tries, where a file lock hands over as soon as it is released.
The kernel drops the lock of a killed process; SQLite drops its uncommitted frames. The seq
check above stays as the backstop for any writer that does not take the lock.

Writable or not. A failed commit marks the log unwritable and a successful one writable again;
`on_writable` hears every change (the checkpoint's health follows it: NOT_SERVING while every
decision would be refused `audit_unavailable`). While unwritable, a probe writes and removes a
file of `PROBE_BYTES` beside the log every `probe_interval` seconds, so the log is seen writable
again once the disk has room, even when no caller sends a record (a load balancer that saw
NOT_SERVING sends none).

Cost. A lone record is one INSERT in autocommit mode (a transaction of its own), one statement
where BEGIN / SELECT head / INSERT / COMMIT took four; a batch is BEGIN / INSERTs / COMMIT. Each
statement releases and retakes the GIL, and on a busy server every retake is a wait behind the
request threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Unpack

from checkpoint.audit import segments, store
from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.reader import DecisionReader
from checkpoint.audit.record import GENESIS_HASH, DecisionRecord, record_hash, to_row
from checkpoint.audit.verify import Anchor, VerifyReport
from checkpoint.audit.writable import Writability
from warden.filelock import SharedLock
from warden.private import private_sqlite

log = logging.getLogger(__name__)

# What a probe writes while the log is unwritable: room for a batch of records (WAL frames of a
# few pages each), so a disk with less room than one batch is not called writable.
PROBE_BYTES = 256 * 1024
PROBE_INTERVAL = 1.0


class _Batch:
    """Records waiting for the same transaction, and one parked lock per waiting caller.

    A plain lock per caller, released by the writer, wakes exactly that caller; an Event
    shared by the batch would make every woken caller queue again on the Event's own lock.
    """

    __slots__ = ("rows", "waiters", "first_seq", "error")

    def __init__(self) -> None:
        self.rows: list[tuple[Any, ...]] = []
        self.waiters: list[Any] = []
        self.first_seq = 0
        self.error: BaseException | None = None

    def add(self, row: tuple[Any, ...]) -> tuple[int, Any]:
        waiter = threading.Lock()
        waiter.acquire()
        self.rows.append(row)
        self.waiters.append(waiter)
        return len(self.rows) - 1, waiter

    def finish(self) -> None:
        for waiter in self.waiters:
            waiter.release()


class DecisionLog:
    """An append-only, hash-chained decision log in one SQLite file.

    ``synchronous="NORMAL"`` (default) keeps every commit across a killed process;
    ``"FULL"`` also keeps it across power loss, at the price of an fsync per batch.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        synchronous: store.Synchronous = "NORMAL",
        append_timeout: float = 10.0,
        busy_timeout_ms: int = 5000,
        shared: bool = False,
        probe_interval: float = PROBE_INTERVAL,
    ) -> None:
        self.path = Path(path)
        self._writability = Writability(f"decision log {self.path}", self.probe, probe_interval, log)
        self._synchronous = synchronous
        self._busy_timeout_ms = busy_timeout_ms
        self._append_timeout = append_timeout
        # other processes append to this file too: take turns (see the module docstring)
        self._shared = SharedLock(self.path.with_name(self.path.name + ".write-lock")) if shared else None
        try:
            private_sqlite(self.path)
            # workers starting together would race to make the schema and switch to WAL, which
            # SQLite answers "database is locked" without waiting: one at a time
            with self._shared or contextlib.nullcontext():
                self._conn: sqlite3.Connection | None = self._open()
                last = self._head(self._conn)
        except (OSError, sqlite3.Error, segments.ManifestError) as exc:
            raise AuditUnavailable(f"cannot open decision log {self.path}: {exc}") from exc
        self._committed_seq, self._committed_hash = last or (0, GENESIS_HASH)
        self._head_known = True  # _committed_* is the head on disk, as far as this writer knows
        self._reader = DecisionReader(self.path)

        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # writer waits here for records
        self._pending = _Batch()
        self._closing = False
        self._busy = False  # a transaction is in flight (writer thread or an inline caller)
        self._last_batch = 0  # records in the last committed transaction
        self._writer_alive = True
        self._committed = threading.Condition()  # followers wait here for commits
        self._batches = self._records = self._failures = self._writing = 0

        self._writer = threading.Thread(target=self._run, name="decision-log-writer", daemon=True)
        self._writer.start()

    def _open(self) -> sqlite3.Connection:
        return store.open_writer(self.path, self._synchronous, self._busy_timeout_ms)

    def _head(self, conn: sqlite3.Connection) -> tuple[int, str] | None:
        """The head to chain from: the live file's newest record (sealing always leaves one), or,
        for a live file that holds none, the last sealed segment's head, so a chain never restarts
        at seq 1 beside its segments (docs/audit.md, "Retention")."""
        return store.head(conn) or segments.read_manifest(self.path).sealed_head

    # -- writing ---------------------------------------------------------------------------

    def append(self, record: DecisionRecord | Mapping[str, Any], *, timeout: float | None = None) -> int:
        """Record one decision; return its seq once it is committed.

        Raises ``InvalidAuditRecord`` for a malformed record and ``AuditUnavailable`` when the
        record could not be committed (or not within ``timeout``, default ``append_timeout``).
        Either way the caller must deny. After a timeout the record may still be committed
        later: the log then holds a decision the caller did not act on, the safe direction.
        An inline write (see the module docstring) is bounded by ``busy_timeout_ms`` instead,
        so it is taken only without an explicit timeout.
        """
        row = to_row(record)
        with self._lock:
            if self._closing or not self._writer_alive:
                raise AuditUnavailable("decision log is closed")
            # The last batch held several records: callers overlap, so leave batching to the
            # writer thread; writing one record inline now would spend a commit on it alone.
            inline = not self._busy and not self._pending.rows and self._last_batch <= 1 and timeout is None
            if inline:
                self._busy = True
                self._writing = 1
            else:
                batch = self._pending
                index, waiter = batch.add(row)
                if index == 0:
                    self._work.notify()
        if inline:
            if self._shared is None or self._shared.acquire(blocking=False):
                return self._append_inline(row)
            # Another process is committing, and that wait has no bound of its own (a worker
            # stopped while it holds the lock would hold this caller for ever): hand the record
            # to the writer thread and wait for it at most append_timeout, as a queued caller does.
            with self._lock:
                self._busy = False
                self._writing = 0
                batch = self._pending
                index, waiter = batch.add(row)
                self._work.notify()
        if not waiter.acquire(timeout=self._append_timeout if timeout is None else timeout):
            raise AuditUnavailable("decision log write timed out")
        if batch.error is not None:
            # A fresh exception per caller: one shared instance would collect every
            # thread's traceback.
            raise AuditUnavailable(str(batch.error)) from batch.error
        return batch.first_seq + index

    def _append_inline(self, row: tuple[Any, ...]) -> int:
        """Write `row` in this thread; the caller holds busy, and the shared lock when there is one."""
        try:
            return self._commit([row])
        finally:
            if self._shared is not None:
                self._shared.release()
            self._release()

    def _release(self) -> None:
        with self._lock:
            self._busy = False
            self._writing = 0
            if self._pending.rows or self._closing:
                self._work.notify()
        with self._committed:
            self._committed.notify_all()

    def _run(self) -> None:
        try:
            while True:
                with self._lock:
                    while self._busy or not (self._pending.rows or self._closing):
                        self._work.wait()
                    batch = self._pending
                    if not batch.rows:
                        return  # closing, and everything queued is written
                    self._pending = _Batch()
                    self._busy = True
                    self._writing = len(batch.rows)
                try:
                    batch.first_seq = self._commit(batch.rows)
                except AuditUnavailable as exc:
                    batch.error = exc
                finally:
                    batch.finish()
                    self._release()
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
        """Chain and insert ``batch`` in one transaction; return the first seq. Caller holds busy."""
        if self._shared is None:
            return self._commit_chained(batch)
        with self._shared:
            self._head_known = False  # another worker may have appended since our last commit
            return self._commit_chained(batch)

    def _commit_chained(self, batch: list[tuple[Any, ...]]) -> int:
        try:
            if self._conn is None:
                self._conn = self._open()
            conn = self._conn
            try:
                if not self._head_known and self._shared is None:
                    raise _HeadUnknown
                if not self._head_known:  # under the shared lock: what is committed is the head
                    self._committed_seq, self._committed_hash = self._head(conn) or (0, GENESIS_HASH)
                seq, prev = self._insert(conn, batch, self._committed_seq, self._committed_hash)
            except (_HeadUnknown, sqlite3.IntegrityError):
                # Another writer appended (seq taken), or the head is unknown: read it under the
                # write lock and link to it. A failure in here is a real one (e.g. a trigger).
                self._head_known = False
                conn.execute("BEGIN IMMEDIATE")
                try:
                    head = self._head(conn) or (0, GENESIS_HASH)
                    seq, prev = self._insert(conn, batch, *head, in_transaction=True)
                except BaseException:
                    _rollback(conn)
                    raise
        except Exception as exc:
            self._failures += 1
            self._head_known = False
            log.error("decision log write of %d record(s) failed: %s", len(batch), exc)
            # Start the next batch on a fresh connection: after an I/O error or a connection
            # closed underneath us the old one is not to be trusted.
            self._discard_connection()
            self._writability.set(False)
            raise AuditUnavailable(f"decision log write failed: {exc}") from exc
        n = len(batch)
        self._batches += 1
        self._records += n
        self._last_batch = n
        self._committed_seq, self._committed_hash = seq, prev
        self._head_known = True
        self._writability.set(True)
        return seq - n + 1

    # -- writable or not -------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """False from a failed commit until a commit or a probe succeeds."""
        return self._writability.writable

    def on_writable(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(writable)` now and at every change from now on."""
        self._writability.listen(callback)

    def probe(self) -> bool:
        """True when a file of PROBE_BYTES can be written and synced beside the log (then removed)."""
        path = self.path.with_name(f"{self.path.name}.probe-{os.getpid()}")
        try:
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as probe:
                probe.write(b"\0" * PROBE_BYTES)  # a short write raises here, not a silent success
                probe.flush()
                os.fsync(probe.fileno())
            return True
        except OSError as exc:
            log.debug("decision log probe failed: %s", exc)
            return False
        finally:
            with contextlib.suppress(OSError):
                path.unlink()

    @staticmethod
    def _insert(
        conn: sqlite3.Connection,
        batch: list[tuple[Any, ...]],
        seq: int,
        prev: str,
        *,
        in_transaction: bool = False,
    ) -> tuple[int, str]:
        """Chain ``batch`` after (seq, prev) and write it atomically; return the new head."""
        rows = []
        for values in batch:
            seq += 1
            digest = record_hash(prev, (seq, *values))
            rows.append((seq, *values, prev, digest))
            prev = digest
        if len(rows) == 1 and not in_transaction:
            conn.execute(store.INSERT_SQL, rows[0])  # autocommit: a transaction of its own
            return seq, prev
        if not in_transaction:
            conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(store.INSERT_SQL, rows)
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return seq, prev

    def _discard_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass

    def close(self, timeout: float | None = 30.0) -> None:
        """Write everything queued, stop the writer, release the file. Idempotent."""
        with self._lock:
            self._closing = True
            self._work.notify()
        self._writability.stop()
        self._writer.join(timeout)
        if not self._writer.is_alive():
            self._discard_connection()
            if self._shared is not None:
                self._shared.close()

    def __enter__(self) -> DecisionLog:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closing or not self._writer_alive

    def head(self) -> tuple[int, str]:
        """(seq, hash) of the last committed record; (0, genesis) when empty. Keep it somewhere
        else (another system, a signed note) to make deleting records from the end detectable."""
        return self._reader.head() or (0, GENESIS_HASH)

    def stats(self) -> dict[str, int]:
        with self._lock:
            queued = len(self._pending.rows)
        return {
            "queued": queued,  # waiting for the next batch
            "writing": self._writing,  # in the batch being written now
            "committed_seq": self._committed_seq,
            "batches": self._batches,
            "records": self._records,
            "failures": self._failures,
        }

    def read(
        self, after_seq: int = 0, *, limit: int | None = None, **filters: Unpack[store.Filters]
    ) -> Iterator[dict[str, Any]]:
        return self._reader.read(after_seq, limit=limit, **filters)

    def tail(self, n: int, **filters: Unpack[store.Filters]) -> list[dict[str, Any]]:
        return self._reader.tail(n, **filters)

    def verify(
        self, *, expect_head: tuple[int, str] | None = None, anchors: Iterable[Anchor] = (), public_key: Any = None
    ) -> VerifyReport:
        return self._reader.verify(expect_head=expect_head, anchors=anchors, public_key=public_key)

    def follow(
        self,
        after_seq: int = 0,
        *,
        stop_event: threading.Event | None = None,
        poll_interval: float = 0.5,
        **filters: Unpack[store.Filters],
    ) -> Iterator[dict[str, Any]]:
        """Stored records after ``after_seq``, then live ones as this log commits them.

        Any number of followers may run at once; each is woken by the writer on every commit
        (and polls every ``poll_interval`` for records another process wrote). It ends when
        ``stop_event`` is set (call ``wake_followers()`` to make that immediate) or when the
        log is closed, after yielding everything committed.
        """

        def wait(pos: int, timeout: float) -> None:
            with self._committed:
                if self._committed_seq <= pos and self._writer_alive:
                    self._committed.wait(timeout)

        return self._reader.follow(
            after_seq,
            stop_event=stop_event,
            poll_interval=poll_interval,
            wait=wait,
            ended=lambda: not self._writer_alive,
            **filters,
        )

    def wake_followers(self) -> None:
        with self._committed:
            self._committed.notify_all()


class _HeadUnknown(Exception):
    pass


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # already rolled back by SQLite (e.g. after an I/O error), or the connection is gone
