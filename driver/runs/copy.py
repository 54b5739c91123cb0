"""The driver's part of `warden store copy`: a driver's `driver.db` (runs, goals, events, transcript,
calls, approvals, receipts, spend, pauses) into the shared PostgreSQL tables (postgresql_schema.py).

Every row keeps its key: an event keeps its seq (a follower's `after_seq` means the same after the
move), a call its id (an approval names its call by id), and each numbered table's sequence is
moved past the copied ids in the same transaction, so the first row written after the move is
numbered after the last one copied. A run still running or waiting is copied as it stands: the
driver that starts on the PostgreSQL store picks it up as it would have on the file.

Before anything is written the file is checked: SQLite's own quick_check (a file cut short or
damaged), every run's row read back as a Run, every JSON field the driver reads valid, every value
of its column's type. A file that fails is refused, never half-copied.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

from driver.errors import RunStateError
from driver.runs.postgresql_schema import APPROVAL_COLUMNS, SCHEMA, q
from driver.runs.sqlite_schema import CALL_COLUMNS, PAUSE_COLUMNS, RECEIPT_COLUMNS, RUN_COLUMNS, run_row
from warden.store.copy import CopyRefused, StoreCopy, TableCopy, read_only, refuse_nul

RUNS_FILE = "driver.db"


@dataclass(frozen=True)
class _Table:
    source: str  # the SQLite table
    columns: dict[str, Any]  # DST's columns, with their Python type (sqlite_schema.py)
    identity: str = ""  # the column PostgreSQL numbers itself: copied as it is, its sequence moved after
    json: tuple[str, ...] = ()  # columns that must hold valid JSON

    @property
    def target(self) -> str:
        return f"driver_{self.source}"


# in the order they are written: runs first, so a reader of DST never sees a row of a run not there yet
TABLES: tuple[_Table, ...] = (
    _Table("runs", RUN_COLUMNS),
    _Table("goals", {"run_id": str, "version": int, "goal": str, "author": str, "created_at": float}, json=("goal",)),
    _Table("events", {"seq": int, "run_id": str, "time": float, "kind": str, "data": str}, "seq", ("data",)),
    _Table("transcript", {"id": int, "run_id": str, "entry": str}, "id", ("entry",)),
    _Table("calls", CALL_COLUMNS, "id", ("arguments",)),
    _Table("approvals", APPROVAL_COLUMNS, json=("arguments",)),
    _Table("receipts", RECEIPT_COLUMNS),
    _Table("spend", {"id": int, "day": str, "owner": str, "tenant": str, "run_id": str, "usd": float}, "id"),
    _Table("pauses", PAUSE_COLUMNS),
)
_DEFAULT: dict[Any, Any] = {str: "", int: 0, float: 0.0, bytes: b""}


def read_runs(folder: Path) -> list[TableCopy]:
    path = folder / RUNS_FILE
    if not path.exists():
        return []
    try:
        conn = read_only(path)
        try:
            plan = _check(conn, path)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise CopyRefused(f"runs: {path} cannot be read: {exc}") from None
    out = [_table_copy(path, table, have, total) for table, have, total in plan]
    if out:
        # no driver writes DST's tables while they are filled: the second look for rows (copy.py) holds
        out[0].before = _lock
    return out


def _check(conn: sqlite3.Connection, path: Path) -> list[tuple[_Table, set[str], int]]:
    """The tables to copy, with the columns the file has and their row counts; CopyRefused when the
    file is damaged or does not read back as the driver wrote it."""
    found = [row[0] for row in conn.execute("PRAGMA quick_check")]
    if found != ["ok"]:
        raise CopyRefused(f"runs: {path} is damaged (cut short, or not written whole): {'; '.join(found[:3])}")
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "runs" not in names:
        return []  # a file whose tables were never made: nothing was kept in it
    plan = []
    for table in TABLES:
        if table.source not in names:
            continue  # a file of an older driver, without the newer tables
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table.source})")}
        for column in table.json:
            bad = conn.execute(f"SELECT count(*) FROM {table.source} WHERE NOT json_valid({q(column)})").fetchone()[0]
            if bad:
                raise CopyRefused(f"runs: {path}: {bad} row(s) of {table.source} whose {column} is not JSON")
        total = conn.execute(f"SELECT count(*) FROM {table.source}").fetchone()[0]
        if total:
            plan.append((table, have, total))
    runs = next(((t, have) for t, have, _ in plan if t.source == "runs"), None)
    if runs is not None:
        cursor = conn.execute(_select(*runs))
        while batch := cursor.fetchmany(1000):
            for values in batch:
                row = _values(runs[0], values)
                try:
                    run_row(dict(zip(runs[0].columns, row, strict=True)))
                except (RunStateError, TypeError) as exc:
                    raise CopyRefused(f"runs: {path}: {exc}") from None
    return plan


def _select(table: _Table, have: set[str]) -> str:
    # a column an older driver's file lacks reads as the default the driver gives it (sqlite_schema.create)
    columns = ", ".join(q(c) if c in have else "NULL" for c in table.columns)
    return f"SELECT {columns} FROM {table.source} ORDER BY rowid"


def _values(table: _Table, values: tuple[Any, ...]) -> tuple[Any, ...]:
    """One row as DST's column types; a value of another type is refused, never guessed at."""
    out = []
    for (name, typ), value in zip(table.columns.items(), values, strict=True):
        if value is None:
            out.append(_DEFAULT[typ])
        elif typ is str and isinstance(value, str):
            out.append(value)
        elif typ is float and isinstance(value, int | float):
            out.append(float(value))
        elif typ is int and (isinstance(value, int) or isinstance(value, float) and value.is_integer()):
            out.append(int(value))
        elif typ is bytes and isinstance(value, bytes | str):
            out.append(value if isinstance(value, bytes) else value.encode())
        else:
            raise CopyRefused(f"runs: {table.source}.{name} holds {value!r}, which is no {typ.__name__}")
    return tuple(out)


def _table_copy(path: Path, table: _Table, have: set[str], total: int) -> TableCopy:
    columns = ", ".join(q(c) for c in table.columns)
    overriding = " OVERRIDING SYSTEM VALUE" if table.identity else ""
    sql = f"INSERT INTO {table.target} ({columns}){overriding} VALUES ({', '.join('%s' for _ in table.columns)})"
    after = _move_sequence(table) if table.identity else None
    return TableCopy(table.target, total, sql, lambda size: _rows(path, table, have, size), after=after)


def _rows(path: Path, table: _Table, have: set[str], size: int) -> Iterator[list[tuple[Any, ...]]]:
    conn = read_only(path)
    try:
        cursor = conn.execute(_select(table, have))
        while batch := cursor.fetchmany(size):
            rows = [_values(table, values) for values in batch]
            for row in rows:
                refuse_nul(table.target, row[0], row)
            yield rows
    finally:
        conn.close()


def _move_sequence(table: _Table) -> Callable[[psycopg.Connection[Any]], None]:
    def after(conn: psycopg.Connection[Any]) -> None:
        conn.execute(f"SELECT setval(pg_get_serial_sequence('{table.target}', '{table.identity}'), "
                     f"(SELECT max({table.identity}) FROM {table.target}))")
    return after


def _lock(conn: psycopg.Connection[Any]) -> None:
    conn.execute(f"LOCK TABLE {', '.join(t.target for t in TABLES)} IN EXCLUSIVE MODE")


COPY = StoreCopy("runs", RUNS_FILE, SCHEMA, lambda folder: (folder / RUNS_FILE).exists(), read_runs,
                 tuple(t.target for t in TABLES))
