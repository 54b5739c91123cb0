"""The limits' part of `warden store copy`: the counts of a checkpoint's `limits.db` into the table
every replica shares (limit_store_pg.py), so a window half spent on SQLite is not whole again after
the move. Limit names and keys are escaped exactly as PgLimits escapes them, so a count copied is
found by the same call after the move. Windows long ended are copied too: the PostgreSQL store ages
them out as it does its own.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

from checkpoint.server.limit_store import LIMITS_FILE
from checkpoint.server.limit_store_pg import COUNTS, SCHEMA
from checkpoint.server.single_use_pg import _text
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, read_only

_SELECT = "SELECT limit_name, key, window_start, until, used FROM counts ORDER BY rowid"


def read_limits(folder: Path) -> list[TableCopy]:
    path = folder / LIMITS_FILE
    if not path.exists():
        return []
    try:
        conn = read_only(path)
        try:
            found = [row[0] for row in conn.execute("PRAGMA quick_check")]
            if found != ["ok"]:
                raise CopyRefused(f"limits: {path} is damaged (cut short, or not written whole): {'; '.join(found[:3])}")
            if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'counts'").fetchone():
                return []
            total = conn.execute("SELECT count(*) FROM counts").fetchone()[0]
            # every row checked before the transaction: the table's CHECK would refuse it half-way
            for row in conn.execute(_SELECT):
                _row(path, row)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CopyRefused(f"limits: {path} cannot be read: {exc}") from None
    if not total:
        return []
    return [TableCopy(COUNTS, total, f"INSERT INTO {COUNTS} (limit_name, key, window_start, until, used) "
                      "VALUES (%s, %s, %s, %s, %s)", lambda size: _rows(path, size), _lock)]


def _row(path: Path, row: tuple[Any, ...]) -> tuple[Any, ...]:
    name, key, start, until, used = row
    if not (type(name) is str and type(key) is str and all(type(v) is int for v in (start, until, used))) or used < 0:
        raise CopyRefused(f"limits: {path} holds a count that is no count: {row!r}")
    return _text(name), _text(key), start, until, used


def _rows(path: Path, size: int) -> Iterator[list[tuple[Any, ...]]]:
    conn = read_only(path)
    try:
        cursor = conn.execute(_SELECT)
        while batch := cursor.fetchmany(size):
            yield [_row(path, row) for row in batch]
    finally:
        conn.close()


def _lock(conn: psycopg.Connection[Any]) -> None:
    # no replica counts into the table while it is filled: the second look for rows (copy.py) holds
    conn.execute(f"LOCK TABLE {COUNTS} IN EXCLUSIVE MODE")


COPY = StoreCopy("limits", LIMITS_FILE, SCHEMA, lambda folder: (folder / LIMITS_FILE).exists(), read_limits, (COUNTS,))
