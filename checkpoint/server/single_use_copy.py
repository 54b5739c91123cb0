"""Single use's part of `warden store copy`: the keys spent and the runs ended in a data folder's
`approvals-used.db`, into the shared PostgreSQL tables (single_use_pg.py).

Both are one-way facts a fleet must keep: an approval spent on SQLite stays spent after the move,
and a cancelled run stays cancelled. Keys are escaped exactly as the PostgreSQL store escapes them,
so a key spent before the move is found by the same claim after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from checkpoint.server.ended_runs_feed import TABLE as ENDED
from checkpoint.server.single_use_pg import SCHEMA, USED, _text
from checkpoint.server.stores import SINGLE_USE_FILE
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, read_only


def read_single_use(folder: Path) -> list[TableCopy]:
    path = folder / SINGLE_USE_FILE
    if not path.exists():
        return []
    try:
        conn = read_only(path)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            counts = {name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]
                      for name in ("used", "ended_runs") if name in tables}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CopyRefused(f"single_use: {path} cannot be read: {exc}") from None
    out = []
    if counts.get("used"):
        out.append(TableCopy(USED, counts["used"], f"INSERT INTO {USED} (key, used_by, at) VALUES (%s, %s, COALESCE(%s, now()))",
                             lambda size: _rows(path, "SELECT key, used_by, at FROM used ORDER BY rowid", size)))
    if counts.get("ended_runs"):
        out.append(TableCopy(ENDED, counts["ended_runs"], f"INSERT INTO {ENDED} (run_id, how, at) VALUES (%s, %s, COALESCE(%s, now()))",
                             lambda size: _rows(path, "SELECT run_id, how, at FROM ended_runs ORDER BY rowid", size)))
    return out


def _rows(path: Path, sql: str, size: int) -> Iterator[list[tuple[Any, ...]]]:
    conn = read_only(path)
    try:
        cursor = conn.execute(sql)
        while batch := cursor.fetchmany(size):
            yield [(_text(key), _text(value), _moment(at)) for key, value, at in batch]
    finally:
        conn.close()


def _moment(text: str) -> datetime | None:
    """The SQLite store's RFC 3339 time; a row without one takes the moment of the copy."""
    return datetime.fromisoformat(text) if text else None


COPY = StoreCopy("single_use", SINGLE_USE_FILE, SCHEMA, lambda folder: (folder / SINGLE_USE_FILE).exists(), read_single_use, (USED, ENDED))
