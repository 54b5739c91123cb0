"""`warden store copy SRC DST`: a SQLite data folder's stores written into an empty PostgreSQL store.

Each store that moves says how in a `StoreCopy` of its own (registered in warden/store_cli.py,
COPIES), so a store that gains a PostgreSQL backend adds one and nothing here changes. The copy is
all or nothing: every source is read and checked (the decision log's chain verified) before
anything is written, and every table is written in ONE transaction, so a refusal or a failure
half-way leaves DST as it was and a later run starts from the same place. A table of DST that
already holds rows is never written into: two histories are never merged, and a copy run twice is
refused the second time.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import quote

import psycopg

from warden.store.errors import StoreSchemaMismatch
from warden.store.migrations import Schema, require_current
from warden.store.pg import Database

BATCH = 1000
# a line of progress at most this often (rows), so a long copy shows it is moving
PROGRESS_EVERY = 10_000

Row = tuple[Any, ...]


class CopyRefused(Exception):
    """The copy would lose, merge or corrupt something: nothing was written."""


@dataclass
class TableCopy:
    """The rows of one DST table, read from SRC. `batches(size)` may be called once, at write time,
    and raises CopyRefused when SRC changed under it in a way that breaks what was checked."""

    table: str
    total: int
    insert_sql: str
    batches: Callable[[int], Iterator[list[Row]]]
    # run inside the transaction before the first insert (a lock to take, partitions to create)
    before: Callable[[psycopg.Connection[Any]], None] | None = None
    # run inside the transaction after the last insert (an identity's sequence moved past the copied ids)
    after: Callable[[psycopg.Connection[Any]], None] | None = None


@dataclass
class StoreCopy:
    """One store: what it reads in SRC (`files`, shown to the user), its schema on DST, whether
    `present(folder)` holds any of it (a cheap look, before anything is read), `read(folder)`: its
    tables, checked, or [] when they are empty; `tables`: DST's tables it writes, which must be empty."""

    name: str
    files: str
    schema: Schema
    present: Callable[[Path], bool]
    read: Callable[[Path], list[TableCopy]]
    tables: tuple[str, ...] = field(default=())


def read_only(path: Path) -> sqlite3.Connection:
    """A SQLite file opened for reading only: the copy never changes SRC."""
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)


def refuse_nul(table: str, key: Any, row: Sequence[Any]) -> None:
    """PostgreSQL's text cannot hold NUL: said before the transaction would fail on it."""
    for value in row:
        if type(value) is str and "\x00" in value:
            raise CopyRefused(f"{table} row {key!r} holds a NUL character, which PostgreSQL text cannot store")


def copy_folder(folders: Path | Sequence[Path], db: Database, stores: Sequence[StoreCopy], out: TextIO) -> int:
    """Copy every store that one of `folders` holds into `db`; the number of rows written.
    CopyRefused (nothing written) when one cannot be copied whole, or two folders hold the same store."""
    folders = [folders] if isinstance(folders, Path) else list(folders)
    for store in stores:
        try:
            require_current(db, store.schema)
        except StoreSchemaMismatch as exc:
            raise CopyRefused(str(exc)) from None
    found: list[tuple[StoreCopy, Path]] = []
    for store in stores:
        holders = [folder for folder in folders if store.present(folder)]
        if len(holders) > 1:
            raise CopyRefused(f"{store.name}: both {holders[0]} and {holders[1]} hold {store.files}: name one folder "
                              "per process (two histories are never merged)")
        if holders:
            found.append((store, holders[0]))
        else:
            print(f"{store.name}: no {store.files} in {', '.join(map(str, folders))}: nothing to copy", file=out)
    with db.connection() as conn:
        _refuse_filled(conn, [store for store, _ in found])  # first, and cheap: before a long read of SRC
    plans: list[tuple[StoreCopy, list[TableCopy]]] = []
    for store, folder in found:
        # a large log's check takes a while before the first row is written: say what is happening
        print(f"{store.name}: reading and checking {store.files} in {folder}", file=out, flush=True)
        tables = store.read(folder)
        if tables:
            plans.append((store, tables))
        else:
            print(f"{store.name}: {store.files} in {folder} is empty: nothing to copy", file=out)
    written = 0
    with db.transaction() as conn:
        for _store, tables in plans:
            for table in tables:
                if table.before is not None:
                    table.before(conn)
        # again under the locks the `before` steps took: a node may have written meanwhile
        _refuse_filled(conn, [store for store, _ in plans])
        for store, tables in plans:
            for table in tables:
                written += _write(conn, store, table, out)
    return written


def _refuse_filled(conn: psycopg.Connection[Any], stores: Sequence[StoreCopy]) -> None:
    for store in stores:
        for table in store.tables:
            row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            if row and row[0]:
                raise CopyRefused(
                    f"{store.name}: DST already holds {row[0]} row(s) in {table}: a copy is only ever made into "
                    "an empty store (two histories are never merged; a copy made before is not made again)")


def _write(conn: psycopg.Connection[Any], store: StoreCopy, table: TableCopy, out: TextIO) -> int:
    done = shown = 0
    with conn.cursor() as cursor:
        for batch in table.batches(BATCH):
            cursor.executemany(table.insert_sql.encode(), batch)
            done += len(batch)
            if done - shown >= PROGRESS_EVERY:
                shown = done
                print(f"{store.name}: {table.table}: {done}/{table.total} copied", file=out, flush=True)
    if done != table.total:
        raise CopyRefused(f"{store.name}: {table.table}: read {done} rows of the {table.total} checked: "
                          "SRC changed during the copy; stop every process on it and copy again")
    if table.after is not None:
        table.after(conn)
    if done != shown:
        print(f"{store.name}: {table.table}: {done}/{table.total} copied", file=out, flush=True)
    return done
