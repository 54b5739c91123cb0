"""The agent catalog's own SQL (checkpoint/policy/sqlite_store.py) against catalogs sqlite-utils made:
older files upgraded in place to the one table shape, and an act's rows written together or not at all."""

from __future__ import annotations

import sqlite3

import pytest
import sqlite_utils
from ckpt_helpers import FOLDERS

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.policy import sqlite_store as sqlrows

# The tables as sqlite-utils made them before the catalog used plain sqlite3 (without the
# `proposed_for` columns, added later): a catalog file from then.
OLD_TABLES = {
    "agent_versions": ({"agent": str, "version": str, "snapshot": str, "first_seen": str, "policy_revision": str},
                       ("agent", "version")),
    "policy_revisions": ({"revision": str, "files": str, "first_seen": str}, "revision"),
    "agent_lifecycle": ({"agent": str, "version": str, "status": str, "source": str, "proposed_by": str,
                         "proposed_at": str, "note": str, "decided_by": str, "decided_at": str,
                         "decision_note": str}, ("agent", "version")),
    "agent_live": ({"agent": str, "version": str, "file_version": str}, "agent"),
    "entry_versions": ({"kind": str, "tenant": str, "name": str, "version": str, "snapshot": str,
                        "first_seen": str}, ("kind", "tenant", "name", "version")),
    "entry_lifecycle": ({"kind": str, "tenant": str, "name": str, "version": str, "status": str, "source": str,
                         "proposed_by": str, "proposed_at": str, "note": str, "decided_by": str, "decided_at": str,
                         "decision_note": str}, ("kind", "tenant", "name", "version")),
    "entry_live": ({"kind": str, "tenant": str, "name": str, "version": str, "file_version": str},
                   ("kind", "tenant", "name")),
}


def _shape(path) -> dict[str, list[tuple]]:
    conn = sqlite3.connect(path)
    try:
        return {t: [r[1:] for r in conn.execute(f"PRAGMA table_info({sqlrows.quote(t)})")]
                for t in sqlrows.table_names(conn)}
    finally:
        conn.close()


def _old_catalog(path) -> None:
    db = sqlite_utils.Database(path)
    for table, (columns, pk) in OLD_TABLES.items():
        db.table(table).create(columns, pk=pk)
    for table in ("agent_lifecycle", "entry_lifecycle"):
        db.table(table).add_column("proposed_for", str)
    db.close()


def test_a_new_catalog_has_the_one_table_shape_an_old_one_upgrades_to(tmp_path):
    _old_catalog(tmp_path / "old.db")
    AgentCatalog(tmp_path / "new.db")
    AgentCatalog(tmp_path / "old.db")  # upgraded at open (catalog_upgrade.py)
    assert _shape(tmp_path / "new.db") == _shape(tmp_path / "old.db")
    assert sorted(_shape(tmp_path / "new.db")) == ["catalog_heads", "catalog_items", "policy_revisions"]
    for name in ("new.db", "old.db"):
        assert sqlite3.connect(tmp_path / name).execute("PRAGMA user_version").fetchone()[0] == 1


def test_a_catalog_from_before_proposed_for_upgrades_and_loads(tmp_path):
    db = sqlite_utils.Database(tmp_path / "catalog.db")
    for table, (columns, pk) in OLD_TABLES.items():
        db.table(table).create(columns, pk=pk)
    db.close()
    catalog = AgentCatalog(tmp_path / "catalog.db")
    policies = load_policy_dir(FOLDERS["shipped"], catalog=catalog)
    assert "proposed_for" in sqlrows.columns(sqlite3.connect(tmp_path / "catalog.db"), "catalog_items")
    # and a second process reads what the first wrote
    again = AgentCatalog(tmp_path / "catalog.db", read_only=True)
    for name, version in policies.agents.items():
        assert again.live_version(name) == version.version


def test_upsert_sets_the_given_columns_and_keeps_the_others():
    conn = sqlite3.connect(":memory:")
    sqlrows.create_table(conn, "t", ("a", "b", "c", "d"), ("a", "b"))
    with conn:
        sqlrows.upsert(conn, "t", {"a": "1", "b": "2", "c": "x", "d": "y"}, ("a", "b"))
        sqlrows.upsert(conn, "t", {"a": "1", "b": "2", "c": "z"}, ("a", "b"))
        sqlrows.upsert(conn, "t", {"a": "1", "b": "3", "c": "w"}, ("a", "b"))
    assert sqlrows.rows(conn, "select * from t order by b") == [
        {"a": "1", "b": "2", "c": "z", "d": "y"}, {"a": "1", "b": "3", "c": "w", "d": None}]
    with pytest.raises(ValueError):  # a NULL key would add a row, never update one
        sqlrows.upsert(conn, "t", {"a": "1", "c": "v"}, ("a", "b"))


def test_insert_ignore_keeps_the_first_row():
    conn = sqlite3.connect(":memory:")
    sqlrows.create_table(conn, "t", ("k", "v"), "k")
    with conn:
        sqlrows.insert_ignore(conn, "t", [{"k": "1", "v": "first"}, {"k": "1", "v": "second"}])
    assert sqlrows.rows(conn, "select * from t") == [{"k": "1", "v": "first"}]


def test_an_act_that_fails_half_way_writes_nothing(tmp_path):
    path = tmp_path / "c.db"
    conn = sqlite3.connect(path)
    sqlrows.create_table(conn, "t", ("k", "v"), "k")
    with pytest.raises(LookupError), conn:
        sqlrows.upsert(conn, "t", {"k": "1", "v": "written"}, "k")
        sqlrows.update(conn, "t", "k", ("missing",), {"v": "x"})  # no such row: the act stops
    # another connection (another process) sees nothing of it
    assert sqlrows.rows(sqlite3.connect(path), "select * from t") == []
