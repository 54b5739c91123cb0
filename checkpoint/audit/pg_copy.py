"""The decision log's part of `warden store copy`: a SQLite log (sealed segments and the live
file) into the PostgreSQL log, record for record, so that the same seqs carry the same hashes.

Nothing is converted or rehashed: the PostgreSQL table has the SQLite log's current columns and
hash (pg_schema.py). So the chain is verified whole before the copy (against the heads the checkpoint signed beside it), and every record is checked
again as it is written, linked to the one before: a log changed between the two reads stops the
copy inside its transaction, and nothing is kept. Signed heads and anchors taken before the move
name (seq, hash) pairs that are still in the copied chain, so they verify against it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from checkpoint.audit import heads, segments, store
from checkpoint.audit.backends import LOG_FILE
from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.pg_query import INSERT_SQL
from checkpoint.audit.pg_schema import CHAIN_LOCK, SCHEMA, TABLE, create_partition_sql, partition_of
from checkpoint.audit.reader import DecisionReader
from checkpoint.audit.record import COLUMNS
from checkpoint.audit.spans import Spans
from checkpoint.audit.verify import Anchor, ChainCheck
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, refuse_nul


def has_log(folder: Path) -> bool:
    path = folder / LOG_FILE
    return path.exists() or segments.folder(path).exists()


def read_log(folder: Path) -> list[TableCopy]:
    path = folder / LOG_FILE
    try:
        manifest = segments.read_manifest(path)
        live_schema = _live_schema(path)
        report = DecisionReader(path).verify(anchors=_signed_heads(path))
    except (AuditUnavailable, segments.ManifestError, OSError, ValueError) as exc:
        raise CopyRefused(f"decisions: {path} cannot be read: {exc}") from None
    if not report.ok:
        raise CopyRefused(f"decisions: the chain of {path} does not verify, so nothing is copied: {report.summary()}")
    if report.start_seq:
        raise CopyRefused(
            f"decisions: records 1..{report.start_seq} of {path} were pruned; the PostgreSQL log verifies from "
            "seq 1, so a log that starts later cannot be copied (keep it where it is, read-only)")
    older = sorted({s.schema for s in manifest.seals if s.schema != store.SCHEMA_VERSION}
                   | ({live_schema} if live_schema not in (0, store.SCHEMA_VERSION) else set()))
    if older:
        raise CopyRefused(
            f"decisions: {path} holds records of schema {', '.join(map(str, older))}, written by an older warden; "
            f"the PostgreSQL log holds schema {store.SCHEMA_VERSION} records only, and rewriting old ones would "
            "change their hashes (keep that log where it is, read-only, and copy a log started since)")
    total = report.head_seq
    if total == 0:
        return []

    def before(conn: psycopg.Connection[Any]) -> None:
        # the chain's lock, as every writer takes it: no checkpoint appends while the copy is written
        conn.execute(f"SELECT pg_advisory_xact_lock({CHAIN_LOCK})")
        for number in range(partition_of(1), partition_of(total) + 1):
            conn.execute(create_partition_sql(number).encode())

    def batches(size: int) -> Iterator[list[tuple[Any, ...]]]:
        check = ChainCheck()
        with Spans(path) as spans:
            page: list[dict[str, Any]] = []
            for row in spans.rows(0, total, page=size):
                page.append(row)
                if len(page) == size:
                    yield _checked(page, check, path)
                    page = []
            if page:
                yield _checked(page, check, path)

    return [TableCopy(TABLE, total, INSERT_SQL, batches, before)]


def _signed_heads(path: Path) -> list[Anchor]:
    """The heads the checkpoint signed beside the log, as anchors: the chain alone cannot show
    records deleted from its end, and they can. One whose signature fails refuses the copy."""
    source = heads.heads_path(path)
    if not source.exists():
        return []
    signed = heads.read_heads(source)
    if not signed:
        return []
    public = heads.load_public_key(heads.key_path(path))
    anchors = []
    for number, head in enumerate(signed, 1):
        if not head.verifies(public):
            raise CopyRefused(f"decisions: signed head {number} of {source} (seq {head.seq}) does not verify with "
                              f"the folder's key {heads.key_id(public)}: nothing copied")
        anchors.append(head.anchor(f"signed head {number} of {source}"))
    return anchors


def _live_schema(path: Path) -> int:
    if not path.exists():
        return 0
    conn = store.open_reader(path)
    try:
        return store.schema_of(conn)
    finally:
        conn.close()


def _checked(page: list[dict[str, Any]], check: ChainCheck, path: Path) -> list[tuple[Any, ...]]:
    if not check.feed(page):
        raise CopyRefused(f"decisions: {path} changed during the copy: {check.report().summary()}; nothing copied")
    rows = [tuple(row[name] for name in COLUMNS) for row in page]
    for row in rows:
        refuse_nul(TABLE, row[0], row)
    return rows


COPY = StoreCopy("decisions", f"{LOG_FILE} (and its sealed segments)", SCHEMA, has_log, read_log, (TABLE,))
