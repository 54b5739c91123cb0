"""The catalog's and the learnings' part of `warden store copy`: a data folder's `catalog.db` and
`learnings.db` into the tables a fleet shares (postgresql_store.py), row for row. Both files hold the
one table shape (catalog_items.py): their items land in the one `checkpoint_catalog_items`. A file an
earlier release wrote is upgraded on a copy in memory first (catalog_upgrade.py): SRC is never written.

Rows are copied in the order they were first written (SQLite's rowid), which the PostgreSQL store
keeps as its `_inserted` order, so lists and histories read the same after the move. The tables'
triggers move the change counters as the rows land: a replica that is running follows the copy
as it follows any act, once it commits.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from checkpoint.policy import catalog_upgrade
from checkpoint.policy.catalog_items import HEADS, ITEMS
from checkpoint.policy.postgresql_store import PREFIX, SCHEMA, quote
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, read_only, refuse_nul
from warden.store.errors import StoreError

# each file's tables, as catalog.py and learnings.py make them (the one table shape)
FILES: dict[str, tuple[str, ...]] = {
    "catalog.db": ("policy_revisions", ITEMS, HEADS),
    "learnings.db": (ITEMS, HEADS),
}


def has_catalog(folder: Path) -> bool:
    return any((folder / name).exists() for name in FILES)


def _open(path: Path) -> sqlite3.Connection:
    """The file read-only, or (written by an earlier release) a copy of it in memory, upgraded."""
    conn = read_only(path)
    try:
        if not catalog_upgrade.needed(conn, str(path)):
            return conn
        memory = sqlite3.connect(":memory:")
        conn.backup(memory)
        conn.close()
    except StoreError as exc:
        conn.close()
        raise CopyRefused(f"catalog: {exc}") from None
    except BaseException:
        conn.close()
        raise
    catalog_upgrade.upgrade(memory, str(path))
    return memory


def read_catalog(folder: Path) -> list[TableCopy]:
    out: list[TableCopy] = []
    for name, known in FILES.items():
        path = folder / name
        if not path.exists():
            continue
        try:
            conn = _open(path)
            try:
                tables = [row[0] for row in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")]
                unknown = sorted(set(tables) - set(known))
                if unknown:
                    raise CopyRefused(f"catalog: {path} holds table(s) {', '.join(unknown)} that this release does "
                                      "not know: copy it with the release that wrote it")
                for table in (t for t in known if t in tables):
                    columns = [row[1] for row in conn.execute(f"PRAGMA table_info({quote(table)})")]
                    total = conn.execute(f"SELECT count(*) FROM {quote(table)}").fetchone()[0]
                    if total:
                        out.append(_table(path, table, columns, total))
            finally:
                conn.close()
        except sqlite3.Error as exc:
            raise CopyRefused(f"catalog: {path} cannot be read: {exc}") from None
    return out


def _table(path: Path, table: str, columns: list[str], total: int) -> TableCopy:
    names = ", ".join(quote(c) for c in columns)
    target = PREFIX + table
    insert = f"INSERT INTO {target} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"

    def batches(size: int) -> Iterator[list[tuple[Any, ...]]]:
        conn = _open(path)
        try:
            cursor = conn.execute(f"SELECT {names} FROM {quote(table)} ORDER BY rowid")
            while batch := cursor.fetchmany(size):
                for row in batch:
                    refuse_nul(target, row[0], row)
                yield batch
        finally:
            conn.close()

    return TableCopy(target, total, insert, batches)


COPY = StoreCopy("catalog", "catalog.db or learnings.db", SCHEMA, has_catalog, read_catalog,
                 tuple(dict.fromkeys(PREFIX + t for names in FILES.values() for t in names)))
