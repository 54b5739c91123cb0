"""The receipts' part of `warden store copy`: a toolrunner's `toolrunner.db` into the shared
PostgreSQL table (postgresql.py), so that a grant spent on SQLite is not spent again on the fleet.

Only finished calls are copied. A claim still `running` belongs to a call in progress or cut off
by a crash; its toolrunner turns it into an `interrupted` receipt when it starts again, and
that is where it must be decided, so the copy refuses until then.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolrunner.receipts import SQLITE_FILE
from toolrunner.receipts.postgresql import SCHEMA, TABLE
from toolrunner.receipts.sqlite import RECEIPTS
from toolrunner.receipts.store import RUNNING
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, read_only, refuse_nul

_COLUMNS = "decision_id, run_id, tool, instance, state, code, claimed_at, finished_at, receipt"


def read_receipts(folder: Path) -> list[TableCopy]:
    path = folder / SQLITE_FILE
    if not path.exists():
        return []
    try:
        conn = read_only(path)
        try:
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (RECEIPTS,)).fetchone():
                return []
            total, running = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE state = ?) FROM {RECEIPTS}", (RUNNING,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CopyRefused(f"receipts: {path} cannot be read: {exc}") from None
    if running:
        raise CopyRefused(
            f"receipts: {path} holds {running} call(s) still marked running (in progress, or cut off by a crash): "
            "stop the toolrunner, start it once on this data folder so it marks them interrupted, stop it, copy again")
    if not total:
        return []
    return [TableCopy(TABLE, total, f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, COALESCE(%s, now()), %s, %s)",
                      lambda size: _rows(path, size))]


def _rows(path: Path, size: int) -> Iterator[list[tuple[Any, ...]]]:
    conn = read_only(path)
    try:
        has_instance = any(row[1] == "instance" for row in conn.execute(f"PRAGMA table_info({RECEIPTS})"))
        instance = "instance" if has_instance else "NULL"
        cursor = conn.execute(f"SELECT decision_id, run_id, tool, {instance}, state, code, claimed_at, finished_at, "
                              f"receipt FROM {RECEIPTS} ORDER BY rowid")
        while batch := cursor.fetchmany(size):
            rows = [(decision_id, run_id or "", tool or "", who or "", state, code or "", _moment(claimed),
                     _moment(finished), blob)
                    for decision_id, run_id, tool, who, state, code, claimed, finished, blob in batch]
            for row in rows:
                refuse_nul(TABLE, row[0], row)
            yield rows
    finally:
        conn.close()


def _moment(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None


COPY = StoreCopy("receipts", SQLITE_FILE, SCHEMA, lambda folder: (folder / SQLITE_FILE).exists(), read_receipts, (TABLE,))
