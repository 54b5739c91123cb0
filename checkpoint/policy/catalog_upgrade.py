"""Upgrading a catalog or learnings file (SQLite) to the one table shape (catalog_items.py).

The file's `PRAGMA user_version` says its shape: 0 the tables of earlier releases (or a new empty
file), 1 the one table shape. The upgrade moves every row of the old tables into the new ones and
drops the old, all in ONE transaction with the version stamp: a crash half-way leaves the old file
as it was, and the next open upgrades it again. A file holding both shapes, or stamped new with
old tables still in it, was changed by something else half-way: it is refused (store_half_migrated),
never guessed at. A version newer than this release knows is refused too (store_schema_mismatch).

A read-only open never writes the file: sqlite_store.py copies an old file into memory and
upgrades the copy. Only the SQL helpers of sqlite_store.py touch the connection.
"""

from __future__ import annotations

from typing import Any

from checkpoint.policy import sqlite_store as sql
from checkpoint.policy.catalog_items import (
    HEAD_COLUMNS,
    HEAD_KEY,
    HEADS,
    ITEM_COLUMNS,
    ITEM_KEY,
    ITEMS,
    OLD_TABLES,
    VIEWS,
    to_physical,
)
from warden.store.errors import StoreHalfMigrated, StoreSchemaMismatch

VERSION = 1  # the one table shape
CURRENT, OLD, FRESH = "current", "old", "fresh"


def version(conn: Any) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def shape(conn: Any, where: str = "the catalog file") -> str:
    """CURRENT, OLD (tables of earlier releases to move) or FRESH (nothing in it yet); refused
    when half-migrated or newer than this release."""
    found = version(conn)
    tables = set(sql.table_names(conn))
    old = sorted(tables & set(OLD_TABLES))
    new = sorted(tables & {ITEMS, HEADS})
    if found > VERSION:
        raise StoreSchemaMismatch(f"{where} is at catalog version {found}, newer than {VERSION}, the latest this "
                                  "release knows: upgrade warden (never downgrade a catalog)")
    if old and (new or found == VERSION):
        raise StoreHalfMigrated(f"{where} holds the old catalog tables ({', '.join(old)}) and the new shape "
                                f"(version {found}{', ' + ', '.join(new) if new else ''}): it was changed half-way "
                                "by something other than warden; put back the copy kept before the upgrade")
    if found == VERSION:
        return CURRENT
    if new:
        raise StoreHalfMigrated(f"{where} holds the new catalog tables ({', '.join(new)}) but not their version "
                                "stamp: it was changed half-way by something other than warden")
    return OLD if old else FRESH


def needed(conn: Any, where: str = "the catalog file") -> bool:
    """Does the file hold old tables to move? (Raises as `shape` does.)"""
    return shape(conn, where) == OLD


def upgrade(conn: Any, where: str = "the catalog file") -> int:
    """Bring the file to the one table shape in one transaction; the rows moved (0: nothing to do)."""
    found = shape(conn, where)
    if found == CURRENT:
        return 0
    moved = 0
    conn.execute("BEGIN IMMEDIATE")
    try:
        _execute(conn, lambda: _make(conn))
        if found == OLD:
            for table in (t for t in OLD_TABLES if t in sql.table_names(conn)):
                view = VIEWS[table]
                pk = ITEM_KEY if view.table == ITEMS else HEAD_KEY
                for row in sql.rows(conn, f"SELECT * FROM {sql.quote(table)} ORDER BY rowid"):
                    record = row if view.rest else {k: v for k, v in row.items() if k in view.columns}
                    physical = to_physical(view, record)
                    _execute(conn, lambda p=physical, t=view.table, k=pk: sql.upsert(conn, t, p, k))  # type: ignore[misc]
                    moved += 1
            for table in (t for t in OLD_TABLES if t in sql.table_names(conn)):
                _execute(conn, lambda t=table: conn.execute(f"DROP TABLE {sql.quote(t)}"))  # type: ignore[misc]
        conn.execute(f"PRAGMA user_version = {VERSION}")
        conn.commit()
    except Exception as exc:
        conn.rollback()
        # a row the old tables should never have held (a NULL key): the file stays as it was
        raise StoreSchemaMismatch(f"{where} cannot be upgraded to the one table shape ({exc}): it is left as "
                                  "it was; keep running the release that wrote it, or repair the row") from exc
    except BaseException:
        conn.rollback()
        raise
    return moved


def _make(conn: Any) -> None:
    sql.create_table(conn, ITEMS, ITEM_COLUMNS, ITEM_KEY, not_null=ITEM_KEY)
    conn.execute(f"CREATE INDEX IF NOT EXISTS {ITEMS}_kind ON {ITEMS} (kind, state)")
    sql.create_table(conn, HEADS, HEAD_COLUMNS, HEAD_KEY, not_null=HEAD_KEY)


def _execute(conn: Any, step: Any) -> None:
    """One step of the upgrade (a seam where the tests kill the process half-way)."""
    step()
