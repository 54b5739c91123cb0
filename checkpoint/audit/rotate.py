"""Sealing the decision log into segments, pruning old ones, and finishing either after a crash.

Sealing records up to seq N (docs/audit.md, "Retention"), in steps that are each safe to stop
after and to run again:

1. copy records first..N of the live file into `segment-K.db.tmp`, check their chain, fsync it,
   make it read-only, rename it to `segment-K.db` (a leftover `.tmp` is deleted on the next run;
   a `segment-K.db` with no manifest line is deleted too, the live file still holding its records);
2. append the segment's signed line to the manifest and fsync it: from here on its records are
   read from the segment, whatever the live file still holds;
3. delete records up to N from the live file, a few thousand per transaction so writers wait
   milliseconds, not seconds; running it again deletes what is left.

The live file always keeps its newest record, so every writer, in any process and after any
restart, still reads the head from the live file alone and the chain runs on unbroken; a trigger
in the live file refuses an insert at or below its head (checkpoint/audit/store.py), so a writer
holding a stale head cannot reuse a seq that sealing freed. One rotation or prune runs at a time:
they hold an exclusive lock on `decisions.d/.lock`. Writers never take it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checkpoint.audit import segments, store
from checkpoint.audit.heads import key_id, key_path, load_or_create_key
from checkpoint.audit.record import GENESIS_HASH, now
from checkpoint.audit.segments import Manifest, Prune, Seal
from checkpoint.audit.verify import ChainCheck
from warden.private import fsync_path, private_folder

log = logging.getLogger(__name__)

LOCK_FILE = ".lock"
COPY_PAGE = 2000
DELETE_CHUNK = 2000


class RotateError(Exception):
    """Sealing or pruning refused: the log is not in a state to seal (a broken chain, a gap)."""


def _step(name: str) -> None:
    """Called between the steps of a seal or prune; tests replace it to kill the process there."""


@contextlib.contextmanager
def _locked(log_path: Path) -> Iterator[None]:
    where = private_folder(segments.folder(log_path))
    fd = os.open(where / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _live(log_path: Path, busy_timeout_ms: int = 10_000) -> sqlite3.Connection:
    if not log_path.is_file():
        raise FileNotFoundError(f"no decision log at {log_path}")
    conn = sqlite3.connect(str(log_path), isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    return conn


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def recover(log_path: Path) -> Manifest:
    """Finish or undo whatever a seal or prune left half done. Call with the lock held."""
    where = segments.folder(log_path)
    manifest_file = segments.manifest_path(log_path)
    if manifest_file.exists():
        data = manifest_file.read_bytes()
        if data and not data.endswith(b"\n"):  # a line cut off mid-append: that act did not happen
            with manifest_file.open("r+b") as f:
                f.truncate(data.rfind(b"\n") + 1)
                f.flush()
                os.fsync(f.fileno())
    manifest = segments.read_manifest(log_path)
    for tmp in where.glob("segment-*.db.tmp"):
        tmp.unlink()
    listed = {seal.file for seal in manifest.seals}
    conn = _live(log_path)
    try:
        low = conn.execute(f"SELECT min(seq) FROM {store.TABLE}").fetchone()[0]
        for path in where.glob("segment-*.db"):
            if path.name in listed:
                continue
            # sealed but not yet listed: its records are all still in the live file, which stays
            # their home; a file the live one does not cover is left for verify to report
            if low is not None and low <= manifest.sealed_last + 1:
                path.chmod(0o600)
                path.unlink()
        if manifest.sealed_last:
            _delete_sealed(conn, manifest.sealed_last)
    finally:
        conn.close()
    for seal in manifest.seals:
        if manifest.pruned(seal):
            with contextlib.suppress(FileNotFoundError):
                (where / seal.file).unlink()
    return manifest


def _delete_sealed(conn: sqlite3.Connection, upto: int) -> int:
    # before any seq is freed: no writer, however stale its head, may insert at or below the head
    conn.execute(store.APPEND_ONLY_SQL)
    deleted = 0
    while True:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cur = conn.execute(
                f"DELETE FROM {store.TABLE} WHERE seq IN "
                f"(SELECT seq FROM {store.TABLE} WHERE seq <= ? ORDER BY seq LIMIT ?)", (upto, DELETE_CHUNK))
            n = cur.rowcount
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        deleted += n
        _step("deleted_chunk")
        if n < DELETE_CHUNK:
            return deleted


def rotate(log_path: Path, *, upto: int | None = None, key: Ed25519PrivateKey | None = None,
           only_if: Callable[[], bool] | None = None) -> Seal | None:
    """Seal the live file's records up to `upto` (default: all but the newest) into a new segment;
    None when there is nothing to seal. Safe beside writers in this or other processes.
    `only_if`: asked again once the lock is held; None when it says no (another process sealed
    while this one waited for the lock)."""
    log_path = Path(log_path)
    key = key or load_or_create_key(key_path(log_path))
    with _locked(log_path):
        manifest = recover(log_path)
        if only_if is not None and not only_if():
            return None
        conn = _live(log_path)
        try:
            version = store.schema_of(conn)
            head = store.head(conn)
            if head is None:
                return None
            first = manifest.sealed_last + 1
            last = head[0] - 1 if upto is None else min(upto, head[0] - 1)  # the newest record stays live
            if last < first:
                return None
            seal = _write_segment(log_path, conn, manifest, version, first, last, head, key)
            _step("segment_written")
            segments.append_entry(log_path, seal)
            _step("manifest_appended")
            _delete_sealed(conn, last)
            _step("live_deleted")
            return seal
        finally:
            conn.close()


def _write_segment(log_path: Path, conn: sqlite3.Connection, manifest: Manifest, version: int, first: int,
                   last: int, head: tuple[int, str], key: Ed25519PrivateKey) -> Seal:
    where = segments.folder(log_path)
    number = manifest.next_number
    final = where / segments.segment_name(number)
    tmp = final.with_name(final.name + ".tmp")
    schema_sql = [row[0] for row in conn.execute(
        "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('table', 'index') AND sql IS NOT NULL "
        "ORDER BY type DESC", (store.TABLE,))]  # the table, then its indexes (queries by run, by agent)
    fields = store.hashed_fields(version)
    columns = (*fields, "prev_hash", "hash")
    start = manifest.sealed_head or (0, GENESIS_HASH)
    check = ChainCheck(start=start)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    out = sqlite3.connect(str(tmp), isolation_level=None)
    try:
        out.execute("PRAGMA journal_mode=DELETE")  # one file, nothing beside it to copy or lose
        out.execute("BEGIN")
        for sql in schema_sql:
            out.execute(sql)
        out.execute(f"PRAGMA user_version={version}")
        insert = f"INSERT INTO {store.TABLE} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        pos, count, last_row = first - 1, 0, None
        while pos < last:
            rows = conn.execute(f"SELECT {', '.join(columns)} FROM {store.TABLE} WHERE seq > ? AND seq <= ? "
                                "ORDER BY seq LIMIT ?", (pos, last, COPY_PAGE)).fetchall()
            if not rows:
                break
            # never sign what does not verify: the segment's chain is checked as it is copied
            if not check.feed([dict(zip(columns, row, strict=True)) for row in rows], fields):
                assert check.problem is not None
                raise RotateError(f"not sealing a broken chain: {check.problem.summary()}")
            out.executemany(insert, rows)
            pos, count, last_row = rows[-1][0], count + len(rows), rows[-1]
        if count != last - first + 1 or last_row is None:
            raise RotateError(f"the live file does not hold seqs {first}..{last} whole (found {count}); "
                              "run `warden audit verify`")
        first_prev = conn.execute(f"SELECT prev_hash FROM {store.TABLE} WHERE seq = ?", (first,)).fetchone()[0]
        out.execute("COMMIT")
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    out.close()
    fsync_path(tmp)
    tmp.chmod(0o400)
    digest = file_sha256(tmp)
    _step("segment_tmp")
    os.replace(tmp, final)
    fsync_path(where)
    public_id = key_id(key.public_key())
    seal = Seal(number=number, file=final.name, first_seq=first, last_seq=last, first_prev_hash=first_prev,
                last_hash=last_row[-1], last_time=last_row[columns.index("time")], records=count, sha256=digest,
                schema=version, kept_seq=head[0], kept_hash=head[1], sealed_at=now(), key_id=public_id)
    signed = segments.sign(seal, key)
    assert isinstance(signed, Seal)
    return signed


def prune(log_path: Path, *, before_seq: int | None = None, before_time: str | None = None,
          key: Ed25519PrivateKey | None = None) -> list[Seal]:
    """Delete whole sealed segments whose records are all before `before_seq` (every seq below it)
    or `before_time` (stored form), oldest first and only a run of the oldest: their seal lines stay,
    so what remains verifies from the last pruned segment's sealed head."""
    if before_seq is None and before_time is None:
        raise ValueError("prune needs a seq or a time")
    log_path = Path(log_path)
    key = key or load_or_create_key(key_path(log_path))
    done = []
    with _locked(log_path):
        manifest = recover(log_path)
        for seal in manifest.seals:
            if manifest.pruned(seal):
                continue
            if (before_seq is not None and seal.last_seq >= before_seq) or (
                    before_time is not None and seal.last_time >= before_time):
                break
            entry = segments.sign(Prune(number=seal.number, pruned_at=now(), key_id=key_id(key.public_key())), key)
            segments.append_entry(log_path, entry)
            _step("prune_appended")
            path = segments.folder(log_path) / seal.file
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            done.append(seal)
    return done


def live_bytes(log_path: Path) -> tuple[int, str | None]:
    """(bytes the live file's records use, the time of its oldest record): what the automatic
    triggers look at. Pages SQLite freed after a seal are reused by new records, so the file itself
    stops growing at about the rotation size."""
    conn = store.open_reader(log_path)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0] - conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = pages * conn.execute("PRAGMA page_size").fetchone()[0]
        oldest = conn.execute(f"SELECT time FROM {store.TABLE} ORDER BY seq LIMIT 1").fetchone()
        return size, oldest[0] if oldest else None
    finally:
        conn.close()


@dataclass
class AutoRotate:
    """`checkpoint serve --rotate-size MB --rotate-age SECONDS`: a thread that seals the live file
    when its records use more than `max_bytes` or its oldest record is older than `max_age`."""

    log_path: Path
    max_bytes: int | None = None
    max_age_seconds: float | None = None
    interval: float = 30.0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rotations = 0

    def due(self) -> bool:
        from datetime import UTC, datetime, timedelta

        from checkpoint.audit.record import format_time

        size, oldest = live_bytes(self.log_path)
        if self.max_bytes is not None and size >= self.max_bytes:
            return True
        if self.max_age_seconds is not None and oldest is not None:
            limit = format_time(datetime.now(UTC) - timedelta(seconds=self.max_age_seconds))
            return oldest < limit
        return False

    def check_now(self) -> Seal | None:
        if not self.due():  # the cheap look, without the lock, every interval
            return None
        # every worker of `serve --workers N` runs one of these: the one that waited for the lock
        # while another sealed looks again, or it would seal what arrived meanwhile on its own
        seal = rotate(self.log_path, only_if=self.due)
        if seal is not None:
            self.rotations += 1
            log.info("decision log sealed seqs %d..%d into %s", seal.first_seq, seal.last_seq, seal.file)
        return seal

    def start(self) -> AutoRotate:
        if (self.max_bytes or self.max_age_seconds) and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="audit-rotate", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.check_now()
            except Exception:  # a failed rotation must not stop the next; the log keeps growing meanwhile
                log.exception("sealing the decision log failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
