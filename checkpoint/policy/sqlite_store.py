"""The catalog store on SQLite (catalog_store.CatalogStore): the catalog's catalog.db and the
learning store's learnings.db, on the standard sqlite3.

Every policy load opens a catalog, `warden check` included, and sqlite-utils pulled click,
dateutil and pluggy into that start: about a sixth of a check's time for six kinds of statement.
Writes run inside `transaction()` (Python's sqlite3 opens the transaction at the first write and
commits it at the end of the block), so one act's rows land together or not at all. The tables
are made as sqlite-utils made them, so stores from before read and write the same. This is the
only module that opens those databases (shared_state.py watches them through `ChangeCounter`).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote as url_quote

from checkpoint.policy.catalog_store import INSERTED, Lock, Not, Pk
from warden.filelock import SharedLock
from warden.private import private_sqlite

_TYPES = {"text": "TEXT", "integer": "INTEGER", "float": "FLOAT"}


class Upgrade(Protocol):
    """What brings a file to the shape its store reads (catalog_upgrade.py is one)."""

    def needed(self, conn: sqlite3.Connection, where: str, /) -> bool: ...

    def upgrade(self, conn: sqlite3.Connection, where: str, /) -> int: ...


def _read_only_connection(path: str | Path) -> sqlite3.Connection:
    uri = f"file:{url_quote(str(Path(path).resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True, check_same_thread=False)


class SqliteStore:
    """One SQLite file (or memory, `path=None`) behind the CatalogStore interface.

    `read_only` opens an existing file without ever writing it (a CLI check next to a running
    checkpoint). A file shared by several checkpoint workers is locked across processes too
    (a `.lock` file beside it), so an act's check and write hold across them."""

    shared = False  # workers sharing a file refresh before each request (shared_state.py)

    def __init__(self, path: str | Path | None = None, *, read_only: bool = False, upgrade: Upgrade | None = None):
        """`upgrade`: brings a file of an earlier release's shape to this one's at open (the
        catalog's, catalog_upgrade.py); read-only, on a copy in memory, never on the file."""
        self.read_only = read_only
        self.lock: Lock = threading.RLock()
        if path is not None and read_only:
            self._db = _read_only_connection(path)
            if upgrade is not None and upgrade.needed(self._db, str(path)):
                memory = sqlite3.connect(":memory:", check_same_thread=False)
                self._db.backup(memory)
                self._db.close()
                self._db = memory
                upgrade.upgrade(memory, str(path))
            return
        if path is not None:
            private_sqlite(path)
            self.lock = SharedLock(f"{path}.lock")
        # workers opening a new file together race to switch it to WAL (and to upgrade it): one at a time
        with self.lock:
            self._db = sqlite3.connect(str(path or ":memory:"), check_same_thread=False)
            if path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            if upgrade is not None:
                try:
                    upgrade.upgrade(self._db, str(path or ":memory:"))
                except BaseException:
                    self._db.close()
                    raise

    def create_table(self, table: str, columns: Sequence[str] | Mapping[str, str], pk: Pk, *,
                     not_null: Iterable[str] = (), index: Sequence[str] = ()) -> None:
        with self.lock:
            create_table(self._db, table, columns, pk, not_null=not_null)
            if index:
                self._db.execute(f"CREATE INDEX IF NOT EXISTS {quote(table + '_' + index[0])} "
                                 f"ON {quote(table)} ({', '.join(map(quote, index))})")

    def add_column(self, table: str, name: str) -> None:
        with self.lock:
            add_column(self._db, table, name)

    def has_table(self, table: str) -> bool:
        return table in table_names(self._db)

    def rows(self, table: str, where: Mapping[str, Any] | None = None, *, order: Sequence[str] = (),
             limit: int | None = None) -> list[dict[str, Any]]:
        clauses, params = [], []
        for column, value in (where or {}).items():
            if isinstance(value, Not):
                clauses.append(f"{quote(column)} != ?")
                params.append(value.value)
            elif isinstance(value, (list, tuple, set, frozenset)):
                values = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
                clauses.append(f"{quote(column)} in ({', '.join('?' for _ in values)})")
                params += values
            else:
                clauses.append(f"{quote(column)} = ?")
                params.append(value)
        sql = f"select * from {quote(table)}" + (" where " + " and ".join(clauses) if clauses else "")
        if order:
            keys = [("rowid" if k.lstrip("-") == INSERTED else quote(k.lstrip("-"))) + (" desc" if k[0] == "-" else "")
                    for k in order]
            sql += " order by " + ", ".join(keys)
        if limit is not None:
            sql += f" limit {int(limit)}"
        return rows(self._db, sql, params)

    def insert(self, table: str, record: Mapping[str, Any]) -> None:
        names = list(record)
        self._db.execute(f"INSERT INTO {quote(table)} ({', '.join(map(quote, names))}) "
                         f"VALUES ({', '.join('?' for _ in names)})", [record[n] for n in names])

    def insert_ignore(self, table: str, records: Iterable[Mapping[str, Any]]) -> None:
        insert_ignore(self._db, table, records)

    def upsert(self, table: str, record: Mapping[str, Any], pk: Pk) -> None:
        upsert(self._db, table, record, pk)

    def update(self, table: str, pk: Pk, values: Sequence[Any], changes: Mapping[str, Any]) -> None:
        update(self._db, table, pk, values, changes)

    def transaction(self) -> AbstractContextManager[Any]:
        return self._db

    def close(self) -> None:
        with self.lock:
            self._db.close()


class ChangeCounter:
    """Whether another connection committed to a store's file since the last look (`PRAGMA
    data_version`, a few microseconds), on a read-only connection of its own. Shared between
    threads: SQLite is built serialized here (sqlite3.threadsafety 3)."""

    def __init__(self, path: str | Path):
        self._db = _read_only_connection(path)

    def read(self) -> int:
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        self._db.close()


# -- the SQL itself, on a connection ---------------------------------------------------------------


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _pk(pk: Pk) -> tuple[str, ...]:
    return (pk,) if isinstance(pk, str) else pk


def rows(conn: sqlite3.Connection, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
    """The rows of a query, each a dict by column name."""
    cursor = conn.execute(sql, list(params))
    keys = [d[0] for d in cursor.description]
    return [dict(zip(keys, row, strict=True)) for row in cursor]


def table_names(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")]


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({quote(table)})")]


def create_table(conn: sqlite3.Connection, table: str, names: Sequence[str] | Mapping[str, str], pk: Pk, *,
                 not_null: Iterable[str] = ()) -> None:
    """A table with primary key `pk`, unless it exists; `names` maps columns to their types
    ("text", "integer", "float"), or lists TEXT columns."""
    keys = _pk(pk)
    single = keys[0] if len(keys) == 1 else None
    types = dict(names) if isinstance(names, Mapping) else dict.fromkeys(names, "text")
    required = set(not_null)
    lines = [f"   {quote(n)} {_TYPES[t]}{' PRIMARY KEY' if n == single else ''}{' NOT NULL' if n in required else ''}"
             for n, t in types.items()]
    if single is None:
        lines.append(f"   PRIMARY KEY ({', '.join(quote(k) for k in keys)})")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {quote(table)} (\n" + ",\n".join(lines) + "\n)")


def add_column(conn: sqlite3.Connection, table: str, name: str) -> None:
    """A TEXT column added to a table made before it existed."""
    if name not in columns(conn, table):
        conn.execute(f"ALTER TABLE {quote(table)} ADD COLUMN {quote(name)} TEXT")


def insert_ignore(conn: sqlite3.Connection, table: str, records: Iterable[Mapping[str, Any]]) -> None:
    """Insert each record unless a row with its primary key is there already (that row stays)."""
    for record in records:
        names = list(record)
        conn.execute(f"INSERT OR IGNORE INTO {quote(table)} ({', '.join(map(quote, names))}) "
                     f"VALUES ({', '.join('?' for _ in names)})", [record[n] for n in names])


def upsert(conn: sqlite3.Connection, table: str, record: Mapping[str, Any], pk: Pk) -> None:
    """Insert the record, or set its columns on the row with its primary key (other columns stay)."""
    keys = _pk(pk)
    names = list(record)
    missing = [k for k in keys if record.get(k) is None]
    if missing:  # a NULL key never conflicts: it would add a row instead of updating one
        raise ValueError(f"upsert into {table} needs a value for {', '.join(missing)}")
    rest = [n for n in names if n not in keys]
    action = ("DO UPDATE SET " + ", ".join(f"{quote(n)} = excluded.{quote(n)}" for n in rest)) if rest else "DO NOTHING"
    conn.execute(f"INSERT INTO {quote(table)} ({', '.join(map(quote, names))}) VALUES "
                 f"({', '.join('?' for _ in names)}) ON CONFLICT({', '.join(map(quote, keys))}) {action}",
                 [record[n] for n in names])


def update(conn: sqlite3.Connection, table: str, pk: Pk, values: Sequence[Any], changes: Mapping[str, Any]) -> None:
    """Set `changes` on the one row whose primary key is `values`; LookupError when there is none."""
    keys = _pk(pk)
    sets = ", ".join(f"{quote(n)} = ?" for n in changes)
    where = " and ".join(f"{quote(k)} = ?" for k in keys)
    done = conn.execute(f"UPDATE {quote(table)} SET {sets} WHERE {where}", [*changes.values(), *values])
    if done.rowcount != 1:
        raise LookupError(f"{table}: no row {tuple(values)!r} to update")
