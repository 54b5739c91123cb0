"""The one interface the catalog (agents, skills, templates) and the learning store keep their rows
behind, so that a second backend (PostgreSQL, for a fleet) is one more implementation of it.

The stores above it (catalog.py, entries.py, learnings.py) hold the rules: which act is allowed
(states.py), what it changes, what is recorded first. A `CatalogStore` only keeps rows: tables of
named columns with a primary key, read by equality filters, written inside a transaction, under a
lock that holds across every process sharing the store. Nothing else opens the database: today's
implementation is SQLite (`sqlite_store.SqliteStore`); tests/checkpoint/test_ckpt_catalog_store.py
is the contract every implementation passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

Pk = str | tuple[str, ...]
INSERTED = "#inserted"  # an order key: the order rows were first written in


@dataclass(frozen=True, slots=True)
class Not:
    """A filter value: the column differs from `value` (a NULL column matches neither)."""

    value: Any


class Lock(Protocol):
    def __enter__(self) -> Any: ...

    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> Any: ...


class CatalogStore(Protocol):
    """Rows of named columns. A filter maps a column to a value (equal), to a list, tuple, set or
    frozenset (one of them) or to `Not(value)`; `order` names columns, `-column` for descending,
    `INSERTED` for the order of first writes. Rows are written inside `transaction()` only: an
    act's rows land together or not at all."""

    read_only: bool
    lock: Lock  # reentrant in a thread, exclusive across threads and processes
    # other processes' acts reach this one's snapshot only when it is refreshed (a fleet's shared
    # database), so a row newer than the snapshot may be read before the snapshot knows its state
    shared: bool

    def create_table(self, table: str, columns: Sequence[str] | Mapping[str, str], pk: Pk, *,
                     not_null: Iterable[str] = (), index: Sequence[str] = ()) -> None:
        """The table, unless it exists; `columns` maps names to "text", "integer" or "float"
        (a sequence: all text); `index`: columns looked up together."""

    def add_column(self, table: str, name: str) -> None:
        """A text column added to a table made before it existed."""

    def has_table(self, table: str) -> bool: ...

    def rows(self, table: str, where: Mapping[str, Any] | None = None, *, order: Sequence[str] = (),
             limit: int | None = None) -> list[dict[str, Any]]: ...

    def insert(self, table: str, record: Mapping[str, Any]) -> None:
        """A new row; an error when a row with its primary key exists."""

    def insert_ignore(self, table: str, records: Iterable[Mapping[str, Any]]) -> None:
        """Each record unless a row with its primary key is there already (that row stays)."""

    def upsert(self, table: str, record: Mapping[str, Any], pk: Pk) -> None:
        """The record, or its columns set on the row with its primary key (other columns stay)."""

    def update(self, table: str, pk: Pk, values: Sequence[Any], changes: Mapping[str, Any]) -> None:
        """`changes` set on the one row whose key is `values`; LookupError when there is none."""

    def transaction(self) -> AbstractContextManager[Any]: ...

    def close(self) -> None: ...
