"""Retention of the decision log on PostgreSQL: seal closed partitions into an archive, drop them.

The table is partitioned by seq range (pg_schema.py). A partition is closed once the chain's head
lies beyond it: no record can be written to it again. `rotate` exports each closed partition, in
order, into an archive folder laid out as a SQLite log's retention folder (segments.py): the
partition becomes `decisions.d/segment-N.db` (N = partition number + 1) and its signed seal line is
appended to `decisions.d/manifest.jsonl`, beside an empty live file `decisions.db`, so
`warden audit verify --log ARCHIVE/decisions.db --pubkey KEY` proves every exported partition as one
chain. The seal line is then kept in `audit_partitions` too. Each step is safe to stop after and
to run again: a segment file no manifest line lists is made again, and a manifest line whose row is
missing is copied to the table.

`prune` drops (or detaches) the oldest sealed partitions whose last record is older than a cutoff:
one statement per partition instead of a DELETE per row. It refuses, dropping nothing, when a
partition it would drop was never exported (`partition_not_exported`). Each dropped partition's
row keeps its seal and gets a signed prune line, so `verify` proves what remains from the last
dropped partition's sealed head (pg_reader.py). Rotations and prunes, on any replica, take one
session-level advisory lock (RETENTION_LOCK), so they never run at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from checkpoint.audit import segments, store
from checkpoint.audit.heads import key_id
from checkpoint.audit.pg_query import HEAD_SQL
from checkpoint.audit.pg_schema import PARTITIONS, TABLE
from checkpoint.audit.record import COLUMNS, GENESIS_HASH, now
from checkpoint.audit.rotate import file_sha256
from checkpoint.audit.segments import Prune, Seal
from checkpoint.audit.verify import Anchor, ChainCheck
from warden import codes
from warden.private import fsync_path, private_folder
from warden.store.pg import Database

RETENTION_LOCK = 0x7764726F  # "wdro": one rotate or prune at a time, fleet-wide
LOCK_WAIT = 60.0  # seconds a rotate or prune waits for another to finish
EXPORT_PAGE = 5000
# a DROP or DETACH needs an exclusive lock on the parent table, and writers queue behind a waiting
# one: it gives up after this long (a long verify holding the table) and tries again, so Checks
# are held back for at most this long, never for the whole of a slow reader
DROP_LOCK_TIMEOUT_MS = 500
DROP_ATTEMPTS = 20
_BOUND = re.compile(r"FROM \('?(\d+)'?\) TO \('?(\d+)'?\)")


class RetentionError(Exception):
    """A rotate or prune refused; `code` is its stable code (warden/codes.py) or None."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(f"{code}: {message}" if code else message)
        self.code = code


@dataclass(frozen=True)
class Partition:
    number: int
    first_seq: int
    last_seq: int
    name: str


def partitions(conn: psycopg.Connection[Any]) -> list[Partition]:
    """The partitions attached to the decisions table, oldest first (bounds read from the catalog,
    whatever size the writers were given)."""
    rows = conn.execute(
        "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)", (TABLE,)).fetchall()
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound or "")
        if match is None or not name.startswith(f"{TABLE}_p"):
            raise RetentionError(f"partition {name} is not one warden made ({bound})")
        found.append(Partition(int(name.rsplit("_p", 1)[1]), int(match[1]), int(match[2]) - 1, name))
    return sorted(found, key=lambda p: p.first_seq)


def sealed(conn: psycopg.Connection[Any]) -> dict[int, dict[str, Any]]:
    """audit_partitions by partition number."""
    cols = ("number", "first_seq", "last_seq", "first_time", "last_time", "records", "last_hash", "seal",
            "removed", "prune")
    rows = conn.execute(f"SELECT {', '.join(cols)} FROM {PARTITIONS} ORDER BY number").fetchall()
    return {row[0]: dict(zip(cols, row, strict=True)) for row in rows}


@contextlib.contextmanager
def locked(db: Database, wait: float = LOCK_WAIT) -> Iterator[psycopg.Connection[Any]]:
    """A connection of its own holding RETENTION_LOCK; the lock goes with the connection, so a
    process killed mid-rotate never leaves it held."""
    conn = db.connect_alone()
    try:
        deadline = time.monotonic() + wait
        while not conn.execute("SELECT pg_try_advisory_lock(%s)", (RETENTION_LOCK,)).fetchone()[0]:  # type: ignore[index]
            if time.monotonic() > deadline:
                raise RetentionError(f"another rotate or prune held the lock for {wait:g}s; try again")
            time.sleep(0.05)
        yield conn
    finally:
        conn.close()


def _archive_log(archive: Path) -> Path:
    """The archive's empty live file (made once): what `warden audit verify --log` opens."""
    private_folder(archive)
    path = archive / "decisions.db"
    if not path.exists():
        store.open_writer(path, "FULL", 5000).close()
    private_folder(segments.folder(path))
    return path


def rotate(db: Database, archive: Path, key: Ed25519PrivateKey, *, wait: float = LOCK_WAIT) -> list[Seal]:
    """Export and seal every closed partition not sealed yet, oldest first; the seals made."""
    done: list[Seal] = []
    with locked(db, wait) as conn:
        log_path = _archive_log(Path(archive))  # under the lock: two rotates must not both make it
        head_row = conn.execute(HEAD_SQL).fetchone()
        head = int(head_row[0]) if head_row else 0
        known = sealed(conn)
        manifest = _recover(log_path, conn, known, key)
        # the sealed head each partition continues from, by its last seq: dropped partitions included
        ends = {int(row["last_seq"]): str(row["last_hash"]) for row in known.values()}
        for part in partitions(conn):
            if part.last_seq >= head:
                break  # the head's partition (and any after it) is still written to
            if part.number in known:
                continue
            start = (0, GENESIS_HASH) if part.first_seq == 1 else (
                (part.first_seq - 1, ends[part.first_seq - 1]) if part.first_seq - 1 in ends else None)
            if start is None:
                raise RetentionError(f"partition {part.number} (seqs {part.first_seq}..{part.last_seq}) follows "
                                     "no sealed partition: the partitions before it were removed unsealed")
            if manifest.next_number != part.number + 1:
                raise RetentionError(
                    f"the archive {archive} ends at segment {manifest.next_number - 1}, partition {part.number} "
                    f"would be segment {part.number + 1}: rotate into the archive that holds the partitions "
                    "before it (--to)")
            seal, first_time = _export(conn, log_path, part, start, key)
            segments.append_entry(log_path, seal)
            _record(conn, seal, first_time)
            manifest = segments.read_manifest(log_path)
            ends[seal.last_seq] = seal.last_hash
            done.append(seal)
    return done


def _recover(log_path: Path, conn: psycopg.Connection[Any], known: dict[int, dict[str, Any]],
             key: Ed25519PrivateKey) -> segments.Manifest:
    """Finish what a rotate stopped in the middle of: an unlisted segment file is deleted (it is made
    again), a listed seal with no row gets its row."""
    where = segments.folder(log_path)
    for tmp in where.glob("segment-*.db.tmp"):
        tmp.unlink()
    manifest = segments.read_manifest(log_path)
    listed = {seal.file for seal in manifest.seals}
    for path in where.glob("segment-*.db"):
        if path.name not in listed:
            path.chmod(0o600)
            path.unlink()
    public = key.public_key()
    for seal in manifest.seals:
        if seal.number - 1 not in known:
            first = conn.execute(f"SELECT time, prev_hash FROM {TABLE} WHERE seq = %s", (seal.first_seq,)).fetchone()
            last = conn.execute(f"SELECT hash FROM {TABLE} WHERE seq = %s", (seal.last_seq,)).fetchone()
            if first is None or last is None:
                raise RetentionError(f"the archive seals seqs {seal.first_seq}..{seal.last_seq}, which the "
                                     "database no longer holds and never recorded as sealed")
            # only a seal of this log, by this key, is recorded: never another fleet's archive
            if (first[1], last[0]) != (seal.first_prev_hash, seal.last_hash) or not segments.verifies(
                    seal, public, key_id(public)):
                raise RetentionError(f"the archive's segment {seal.number} is not this log's seqs {seal.first_seq}.."
                                     f"{seal.last_seq} sealed with this key: wrong --to, or another key")
            _record(conn, seal, first[0])
            known[seal.number - 1] = {"last_seq": seal.last_seq, "last_hash": seal.last_hash, "removed": None}
    return manifest


def _record(conn: psycopg.Connection[Any], seal: Seal, first_time: str) -> None:
    conn.execute(f"INSERT INTO {PARTITIONS} (number, first_seq, last_seq, first_time, last_time, records, last_hash, "
                 "seal) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                 (seal.number - 1, seal.first_seq, seal.last_seq, first_time, seal.last_time, seal.records,
                  seal.last_hash, segments.line(seal)))


def _export(conn: psycopg.Connection[Any], log_path: Path, part: Partition, start: tuple[int, str],
            key: Ed25519PrivateKey) -> tuple[Seal, str]:
    """Copy the partition's records into a read-only segment file, checking their chain from
    `start`; the signed seal and the partition's first time."""
    number = part.number + 1
    final = segments.folder(log_path) / segments.segment_name(number)
    tmp = final.with_name(final.name + ".tmp")
    live = sqlite3.connect(str(log_path))
    try:  # the table and its indexes, as a SQLite log of this schema has them
        schema_sql = [row[0] for row in live.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = ? AND type IN ('table', 'index') AND sql IS NOT NULL "
            "ORDER BY type DESC", (store.TABLE,))]
    finally:
        live.close()
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    out = sqlite3.connect(str(tmp), isolation_level=None)
    check = ChainCheck(start=start)
    insert = f"INSERT INTO {store.TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
    select = (f"SELECT {', '.join(COLUMNS)} FROM {part.name} WHERE seq > %s AND seq <= %s ORDER BY seq LIMIT %s")
    try:
        out.execute("PRAGMA journal_mode=DELETE")
        out.execute("BEGIN")
        for sql in schema_sql:
            out.execute(sql)
        out.execute(f"PRAGMA user_version={store.SCHEMA_VERSION}")
        pos, count, first_row, last_row = part.first_seq - 1, 0, None, None
        while pos < part.last_seq:
            rows = conn.execute(select.encode(), (pos, part.last_seq, EXPORT_PAGE)).fetchall()
            if not rows:
                break
            # never sign what does not verify: the partition's chain is checked as it is copied
            if not check.feed(dict(zip(COLUMNS, row, strict=True)) for row in rows):
                assert check.problem is not None
                raise RetentionError(f"not sealing a broken chain: {check.problem.summary()}")
            out.executemany(insert, rows)
            first_row = first_row or rows[0]
            pos, count, last_row = rows[-1][0], count + len(rows), rows[-1]
        if count != part.last_seq - part.first_seq + 1 or first_row is None or last_row is None:
            raise RetentionError(f"partition {part.number} does not hold seqs {part.first_seq}..{part.last_seq} "
                                 f"whole (found {count}); run `warden audit verify`")
        out.execute("COMMIT")
    except BaseException:
        out.close()
        tmp.unlink(missing_ok=True)
        raise
    out.close()
    fsync_path(tmp)
    tmp.chmod(0o400)
    digest = file_sha256(tmp)
    os.replace(tmp, final)
    fsync_path(final.parent)
    at = COLUMNS.index
    seal = Seal(number=number, file=final.name, first_seq=part.first_seq, last_seq=part.last_seq,
                first_prev_hash=first_row[at("prev_hash")], last_hash=last_row[at("hash")],
                last_time=last_row[at("time")], records=count, sha256=digest, schema=store.SCHEMA_VERSION,
                kept_seq=part.last_seq, kept_hash=last_row[at("hash")], sealed_at=now(),
                key_id=key_id(key.public_key()))
    signed = segments.sign(seal, key)
    assert isinstance(signed, Seal)
    return signed, first_row[at("time")]


def check_cutoff(text: str, *, at: str | None = None) -> str:
    """`--before` as a stored time; RetentionError(retention_cutoff_invalid) when it cannot be read
    or lies in the future (which would drop what is being written now)."""
    import argparse

    from checkpoint.audit.moments import since

    try:
        cutoff = since(text)
    except argparse.ArgumentTypeError as exc:
        raise RetentionError(str(exc), codes.RETENTION_CUTOFF_INVALID) from None
    if cutoff > (at or now()):
        raise RetentionError(f"{text!r} is in the future; a cutoff must be a time already past",
                             codes.RETENTION_CUTOFF_INVALID)
    return cutoff


def prune(db: Database, key: Ed25519PrivateKey, *, before_time: str, detach: bool = False,
          wait: float = LOCK_WAIT) -> list[dict[str, Any]]:
    """Drop (or detach) the oldest closed partitions whose every record is before `before_time`
    (stored form, checked by check_cutoff); the audit_partitions rows of those removed. Nothing is
    removed when one of them was never exported."""
    with locked(db, wait) as conn:
        head_row = conn.execute(HEAD_SQL).fetchone()
        head = int(head_row[0]) if head_row else 0
        known = sealed(conn)
        plan = []
        for part in partitions(conn):
            if part.last_seq >= head:
                break
            row = known.get(part.number)
            if row is None:
                last = conn.execute(f"SELECT time FROM {part.name} ORDER BY seq DESC LIMIT 1").fetchone()
                if last is not None and last[0] >= before_time:
                    break
                raise RetentionError(f"partition {part.number} (seqs {part.first_seq}..{part.last_seq}) is older "
                                     "than the cutoff and was never exported: run `warden audit rotate` first",
                                     codes.PARTITION_NOT_EXPORTED)
            if row["last_time"] >= before_time:
                break
            plan.append((part, row))
        for part, row in plan:
            _remove(conn, part, row, key, detach)
        return [row for _, row in plan]


def _remove(conn: psycopg.Connection[Any], part: Partition, row: dict[str, Any], key: Ed25519PrivateKey,
            detach: bool) -> None:
    entry = segments.sign(Prune(number=part.number + 1, pruned_at=now(), key_id=key_id(key.public_key())), key)
    how = "detached" if detach else "dropped"
    sql = f"ALTER TABLE {TABLE} DETACH PARTITION {part.name}" if detach else f"DROP TABLE {part.name}"
    for attempt in range(DROP_ATTEMPTS):
        try:
            with conn.transaction():
                conn.execute(f"SET LOCAL lock_timeout = {DROP_LOCK_TIMEOUT_MS}")
                conn.execute(sql)
                conn.execute(f"UPDATE {PARTITIONS} SET removed = %s, prune = %s, removed_at = now() WHERE number = %s",
                             (how, segments.line(entry), part.number))
            row.update(removed=how, prune=segments.line(entry))
            return
        except psycopg.errors.LockNotAvailable:
            if attempt == DROP_ATTEMPTS - 1:
                raise RetentionError(f"partition {part.number}: the table stayed busy (a long read holds it); "
                                     "nothing removed, try again") from None
            time.sleep(0.1)


def parse_line(text: str, kind: type[Seal] | type[Prune]) -> Seal | Prune:
    data = json.loads(text)
    if data.get("kind") != kind.__name__.lower():
        raise ValueError(f"not a {kind.__name__.lower()} line")
    return kind(**data)


def verify_start(conn: psycopg.Connection[Any], public_key: Any) -> tuple[tuple[int, str], list[Anchor], str | None]:
    """What `verify` proves the table from: (start, anchors, problem). The start is the sealed head of
    the last removed partition (each removed one sealed and pruned by signed lines, a run from seq
    1); every sealed partition still present anchors its last record. `problem`: why the seals
    themselves do not hold (then nothing else is checked)."""
    rows = sealed(conn)
    if not rows:
        return (0, GENESIS_HASH), [], None
    if public_key is None:
        if any(row["removed"] for row in rows.values()):
            return (0, GENESIS_HASH), [], ("partitions were pruned and their seals are signed, and there is no key "
                                           "to check them with: pass --pubkey")
        return (0, GENESIS_HASH), [], None  # nothing removed: the chain from seq 1 proves itself
    public_id = key_id(public_key)
    start, anchors, removing = (0, GENESIS_HASH), [], True
    for number, row in sorted(rows.items()):
        try:
            seal = parse_line(row["seal"], Seal)
        except (ValueError, TypeError) as exc:
            return start, [], f"partition {number}: its seal line cannot be read ({exc})"
        assert isinstance(seal, Seal)
        if not segments.verifies(seal, public_key, public_id) or (
                seal.number, seal.first_seq, seal.last_seq, seal.last_hash) != (
                number + 1, row["first_seq"], row["last_seq"], row["last_hash"]):
            return start, [], f"partition {number}: its seal is not signed by key {public_id}, or its row was altered"
        if row["removed"]:
            if not removing or seal.first_seq != start[0] + 1 or (start[0] == 0 and seal.first_prev_hash != GENESIS_HASH):
                return start, [], f"partition {number} was removed, but not as part of a run of the oldest"
            try:
                entry = parse_line(row["prune"] or "", Prune)
            except (ValueError, TypeError):
                entry = None
            if entry is None or entry.number != seal.number or not segments.verifies(entry, public_key, public_id):
                return start, [], f"partition {number} was removed without a prune line signed by key {public_id}"
            start = (seal.last_seq, seal.last_hash)
        else:
            removing = False
            anchors.append(Anchor(seal.last_seq, seal.last_hash, f"the seal of partition {number} ({seal.sealed_at})"))
    return start, anchors, None
