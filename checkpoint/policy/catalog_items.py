"""The one table shape of the catalog: every agent, skill, template and learning is a row of
`catalog_items`, and what is in force per kind and name a row of `catalog_heads` (docs/catalog.md).

    catalog_items  (kind, tenant, name, version) -> state, body (JSON), digest, revision, first_seen,
                   source, proposed_by, proposed_for, proposed_at, note, decided_by, decided_at,
                   decision_note
    catalog_heads  (kind, tenant, name) -> version (in force; "" when none), file_version

Agents are named across tenants (tenant ""); a learning is one item of version "" named by its id,
whose body holds what only learnings have. `policy_revisions` (the files of each revision) stays a
table of its own: it is not an item with a life.

The stores above (catalog.py, entries.py, learnings.py) still speak of the tables they always did
(`agent_versions`, `agent_lifecycle`, `agent_live`, `entry_*`, `learnings`); `ItemStore` is the
CatalogStore they are given, and keeps each of those "views" in the two tables. Filters on a column
of its own are asked of the database; the others (a learning's body) and every order are applied
here, on the few rows of one item or one kind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from checkpoint.policy.catalog_store import INSERTED, CatalogStore, Lock, Not, Pk

ITEMS, HEADS = "catalog_items", "catalog_heads"
ITEM_KEY = ("kind", "tenant", "name", "version")
HEAD_KEY = ("kind", "tenant", "name")
ACT_COLUMNS = ("source", "proposed_by", "proposed_for", "proposed_at", "note", "decided_by", "decided_at",
               "decision_note")
ITEM_COLUMNS = (*ITEM_KEY, "state", "body", "digest", "revision", "first_seen", *ACT_COLUMNS)
HEAD_COLUMNS = (*HEAD_KEY, "version", "file_version")
AGENT, LEARNING = "agent", "learning"
ENTRY_KINDS = ("skill", "template")  # entries.KINDS


@dataclass(frozen=True)
class View:
    """One table the stores above speak of, kept in `ITEMS` or `HEADS`."""

    table: str  # ITEMS or HEADS
    columns: Mapping[str, str]  # its column -> the physical column
    fixed: Mapping[str, str]  # physical columns every row of it has (kind, tenant)
    present: str = ""  # a row of the view: this physical column is set ("" : every row)
    rest: str = ""  # the physical column holding its other columns as one JSON object
    kinds: tuple[str, ...] = ()  # the kinds it holds, when its rows name their kind (skills, templates)


_LIFECYCLE = {"status": "state", **{c: c for c in ACT_COLUMNS}}
_LEARNING = {"id": "name", "tenant": "tenant", "status": "state", "source": "source", "proposed_by": "proposed_by",
             "reviewed_by": "decided_by", "review_note": "decision_note"}
VIEWS: dict[str, View] = {
    "agent_versions": View(ITEMS, {"agent": "name", "version": "version", "snapshot": "body", "first_seen": "first_seen",
                                   "policy_revision": "revision"}, {"kind": AGENT, "tenant": ""}, "body"),
    "agent_lifecycle": View(ITEMS, {"agent": "name", "version": "version", **_LIFECYCLE},
                            {"kind": AGENT, "tenant": ""}, "state"),
    "agent_live": View(HEADS, {"agent": "name", "version": "version", "file_version": "file_version"},
                       {"kind": AGENT, "tenant": ""}),
    "entry_versions": View(ITEMS, {"kind": "kind", "tenant": "tenant", "name": "name", "version": "version",
                                   "snapshot": "body", "first_seen": "first_seen"}, {}, "body", kinds=ENTRY_KINDS),
    "entry_lifecycle": View(ITEMS, {"kind": "kind", "tenant": "tenant", "name": "name", "version": "version",
                                    **_LIFECYCLE}, {}, "state", kinds=ENTRY_KINDS),
    "entry_live": View(HEADS, {c: c for c in HEAD_COLUMNS}, {}, kinds=ENTRY_KINDS),
    "learnings": View(ITEMS, _LEARNING, {"kind": LEARNING, "version": ""}, "state", rest="body"),
}
# the order a file's old tables are moved in: versions before their states, so an item's order is
# its version's
OLD_TABLES = ("agent_versions", "agent_lifecycle", "agent_live", "entry_versions", "entry_lifecycle", "entry_live",
              "learnings")


def make_tables(store: CatalogStore) -> None:
    """The two tables, unless they exist (the PostgreSQL schema makes them: nothing to do there)."""
    store.create_table(ITEMS, ITEM_COLUMNS, ITEM_KEY, not_null=ITEM_KEY, index=("kind", "state"))
    store.create_table(HEADS, HEAD_COLUMNS, HEAD_KEY, not_null=HEAD_KEY)


def digest(body: str | None) -> str | None:
    return hashlib.sha256(body.encode("utf-8")).hexdigest() if body is not None else None


def to_physical(view: View, record: Mapping[str, Any], before: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The physical columns of a view's record; `before`: the physical row it changes (a body's
    other fields stay)."""
    out: dict[str, Any] = dict(view.fixed)
    rest: dict[str, Any] = {}
    for column, value in record.items():
        if column in view.columns:
            out[view.columns[column]] = value
        elif view.rest:
            rest[column] = value
        else:
            raise KeyError(f"no column {column} in the catalog's view")
    if view.rest and rest:
        old = json.loads(before[view.rest]) if before and before.get(view.rest) else {}
        out[view.rest] = json.dumps({**old, **rest}, sort_keys=True)
    if "body" in out:
        out["digest"] = digest(out["body"])
    return out


def from_physical(view: View, row: Mapping[str, Any]) -> dict[str, Any]:
    out = {column: row[physical] for column, physical in view.columns.items()}
    if view.rest:
        out.update(json.loads(row[view.rest] or "{}"))
    return out


def _key(value: Any) -> tuple[Any, ...]:
    return (0,) if value is None else (1, value)  # NULL first, as SQLite orders it


class ItemStore:
    """The CatalogStore the catalog and the learning store are given: their tables as views of
    `ITEMS` and `HEADS` on `store` (any backend). Other tables (policy_revisions) pass through."""

    def __init__(self, store: CatalogStore):
        self.physical = store
        self.read_only = store.read_only
        self.lock: Lock = store.lock
        self.shared = store.shared

    def _view(self, table: str) -> View | None:
        return VIEWS.get(table)

    def create_table(self, table: str, columns: Sequence[str] | Mapping[str, str], pk: Pk, *,
                     not_null: Iterable[str] = (), index: Sequence[str] = ()) -> None:
        if self._view(table) is None:
            self.physical.create_table(table, columns, pk, not_null=not_null, index=index)
        elif not self.physical.has_table(ITEMS):
            make_tables(self.physical)

    def add_column(self, table: str, name: str) -> None:
        view = self._view(table)
        if view is None:
            self.physical.add_column(table, name)
        elif name not in view.columns and not view.rest:
            raise KeyError(f"the catalog's {table} has no column {name}")

    def has_table(self, table: str) -> bool:
        view = self._view(table)
        return self.physical.has_table(view.table if view else table)

    def _physical_rows(self, view: View, where: Mapping[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The physical rows matching what the database can filter; the filters left to apply."""
        asked: dict[str, Any] = dict(view.fixed)
        left: dict[str, Any] = {}
        for column, value in where.items():
            if column in view.columns:
                asked[view.columns[column]] = value
            else:
                left[column] = value
        if view.kinds and "kind" not in asked:
            asked["kind"] = view.kinds
        found = self.physical.rows(view.table, asked, order=(INSERTED,))
        if view.kinds:
            found = [r for r in found if r["kind"] in view.kinds]
        if view.present:
            found = [r for r in found if r[view.present] is not None]
        return found, left

    def rows(self, table: str, where: Mapping[str, Any] | None = None, *, order: Sequence[str] = (),
             limit: int | None = None) -> list[dict[str, Any]]:
        view = self._view(table)
        if view is None:
            return self.physical.rows(table, where, order=order, limit=limit)
        found, left = self._physical_rows(view, where or {})
        if view.rest:  # a learning's agent or dedup key: skip the bodies that cannot hold it unparsed
            for column, value in left.items():
                needle = _needle(column, value)
                if needle:
                    found = [r for r in found if r[view.rest] is not None and needle in r[view.rest]]
        out = [from_physical(view, r) for r in found]
        for column, value in left.items():
            out = [r for r in out if _matches(r.get(column), value)]
        # found in the order of first writes (INSERTED): each sort is stable, the last key sorted first
        indexed = list(enumerate(out))
        for key in reversed(order):
            name = key.lstrip("-")
            indexed.sort(key=(lambda p: p[0]) if name == INSERTED else (lambda p, n=name: _key(p[1].get(n))),  # type: ignore[misc]
                         reverse=key.startswith("-"))
        out = [r for _, r in indexed]
        return out[:limit] if limit is not None else out

    def _one(self, view: View, values: Mapping[str, Any]) -> dict[str, Any] | None:
        """The physical row of a view's key (a learning's id alone names it within its kind)."""
        key = to_physical(view, {k: v for k, v in values.items() if k in view.columns})
        pk = ITEM_KEY if view.table == ITEMS else HEAD_KEY
        found = self.physical.rows(view.table, {k: key[k] for k in pk if k in key})
        return found[0] if found else None

    def insert(self, table: str, record: Mapping[str, Any]) -> None:
        view = self._view(table)
        if view is None:
            self.physical.insert(table, record)
            return
        before = self._one(view, record)
        if before is not None and (not view.present or before[view.present] is not None):
            raise KeyError(f"{table}: a row with this key exists")
        self._write(view, record, before)

    def _write(self, view: View, record: Mapping[str, Any], before: Mapping[str, Any] | None) -> None:
        """The record's columns on its physical row: a new row, or set on the one there."""
        physical = to_physical(view, record, before)
        if before is None:
            self.physical.insert(view.table, physical)
            return
        pk = ITEM_KEY if view.table == ITEMS else HEAD_KEY
        changes = {k: v for k, v in physical.items() if k not in pk}
        if changes:
            self.physical.update(view.table, pk, tuple(before[k] for k in pk), changes)

    def insert_ignore(self, table: str, records: Iterable[Mapping[str, Any]]) -> None:
        view = self._view(table)
        if view is None:
            self.physical.insert_ignore(table, records)
            return
        for record in records:
            before = self._one(view, record)
            # an item whose state was written first (a row of another view) gets its version's columns
            if before is None or (view.present and before[view.present] is None):
                self._write(view, record, before)

    def upsert(self, table: str, record: Mapping[str, Any], pk: Pk) -> None:
        view = self._view(table)
        if view is None:
            self.physical.upsert(table, record, pk)
            return
        keys = (pk,) if isinstance(pk, str) else pk
        missing = [k for k in keys if record.get(k) is None]
        if missing:  # a NULL key never conflicts: it would add a row instead of updating one
            raise ValueError(f"upsert into {table} needs a value for {', '.join(missing)}")
        self._write(view, record, self._one(view, record))

    def update(self, table: str, pk: Pk, values: Sequence[Any], changes: Mapping[str, Any]) -> None:
        view = self._view(table)
        if view is None:
            self.physical.update(table, pk, values, changes)
            return
        keys = (pk,) if isinstance(pk, str) else pk
        where = dict(zip(keys, values, strict=True))
        before = self._one(view, where)
        if before is None or (view.present and before[view.present] is None):
            raise LookupError(f"{table}: no row {tuple(values)!r} to update")
        self._write(view, {**where, **changes}, before)

    def transaction(self) -> AbstractContextManager[Any]:
        return self.physical.transaction()

    def close(self) -> None:
        self.physical.close()


_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_.:@/|+=,;()[]{}#*~!?$%&'<>^`")


def _needle(column: str, value: Any) -> str:
    """The text `"column": "value"` every body holding that field spells the same way (Python's
    json.dumps and PostgreSQL's jsonb both write `": "`), or "" when the value could be spelled
    otherwise (escapes, non-ASCII): then only the parsed body is compared."""
    if not isinstance(value, str) or not set(value) <= _PLAIN or not set(column) <= _PLAIN:
        return ""
    return f'"{column}": "{value}"'


def _matches(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, Not):
        return found is not None and found != wanted.value
    if isinstance(wanted, (list, tuple, set, frozenset)):
        return found in wanted
    return bool(found == wanted)


def items(store: CatalogStore) -> ItemStore:
    """`store` seen through the views (once: a store given twice is not wrapped twice)."""
    return store if isinstance(store, ItemStore) else ItemStore(store)
