"""The few SQL shapes the agent catalog uses (catalog.py, entries.py), on the standard sqlite3.

Every policy load opens a catalog, `warden check` included, and sqlite-utils pulled click,
dateutil and pluggy into that start: about a sixth of a check's time for six kinds of statement.
Writes run inside the caller's `with conn:` block (Python's sqlite3 opens the transaction at the
first write and commits it at the end of the block), so one act's rows land together or not at all.
The tables are made as sqlite-utils made them, so catalogs from before read and write the same.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Pk = str | tuple[str, ...]


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


def create_table(conn: sqlite3.Connection, table: str, names: Sequence[str], pk: Pk) -> None:
    """A table of TEXT columns with primary key `pk`, unless it exists."""
    keys = _pk(pk)
    single = keys[0] if len(keys) == 1 else None
    lines = [f"   {quote(n)} TEXT{' PRIMARY KEY' if n == single else ''}" for n in names]
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
