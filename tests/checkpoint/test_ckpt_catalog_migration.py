"""Upgrading a catalog to the one table shape (catalog_upgrade.py, catalog_pg_upgrade.py).

The fixture (fixtures/catalog_before.db, learnings_before.db) was written by the release before
the one table shape, and fixtures/catalog_before.json holds what that release read back from it
(fixtures/make_catalog_before.py). Opened with today's code, on either backend, every agent, skill,
template and learning reads back the same: its versions, its history, what is live, what is pinned.
An upgrade is one transaction: killed half-way, or stopped by a statement that fails, it leaves the
old file as it was. A read-only open upgrades a copy in memory and never writes the file. A file
between the two shapes is refused (store_half_migrated), a newer one too (store_schema_mismatch).
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.catalog_copy import COPY
from checkpoint.policy.learnings import LearningStore
from checkpoint.policy.postgresql_store import CATALOG, LEARNINGS, SCHEMA, PostgresqlStore
from warden.codes import STORE_HALF_MIGRATED, STORE_SCHEMA
from warden.store.copy import copy_folder
from warden.store.errors import StoreHalfMigrated, StoreSchemaMismatch
from warden.store.migrations import Schema, migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

FIXTURES = Path(__file__).parent / "fixtures"
OLD_TABLES = {"agent_versions", "agent_lifecycle", "agent_live", "entry_versions", "entry_lifecycle", "entry_live",
              "policy_revisions"}
LATER = 1_700_000_000.0 + 6 * 86400  # after the fixture's last act


def _maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_catalog_before", FIXTURES / "make_catalog_before.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPECTED = json.loads((FIXTURES / "catalog_before.json").read_text())


def _copied(tmp_path: Path) -> tuple[Path, Path]:
    catalog, learnings = tmp_path / "catalog.db", tmp_path / "learnings.db"
    shutil.copyfile(FIXTURES / "catalog_before.db", catalog)
    shutil.copyfile(FIXTURES / "learnings_before.db", learnings)
    return catalog, learnings


def _reads(catalog: AgentCatalog, learnings: LearningStore) -> Any:
    return json.loads(json.dumps(_maker().reads(catalog, learnings), sort_keys=True))


def _tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("select name from sqlite_master where type = 'table'")}


def _version(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- SQLite ---------------------------------------------------------------------------------------


def test_the_fixture_is_what_the_release_before_wrote():
    """The guard on the fixture itself: the old tables, unstamped."""
    assert OLD_TABLES <= _tables(FIXTURES / "catalog_before.db") and _version(FIXTURES / "catalog_before.db") == 0
    assert _tables(FIXTURES / "learnings_before.db") == {"learnings"}


def test_an_old_catalog_upgrades_and_reads_back_the_same(tmp_path):
    catalog_path, learnings_path = _copied(tmp_path)
    catalog, learnings = AgentCatalog(catalog_path), LearningStore(learnings_path, clock=lambda: LATER)
    assert _reads(catalog, learnings) == EXPECTED
    catalog.close()
    learnings.close()
    assert _tables(catalog_path) == {"catalog_items", "catalog_heads", "policy_revisions"}
    assert _tables(learnings_path) == {"catalog_items", "catalog_heads"}
    assert _version(catalog_path) == 1 and _version(learnings_path) == 1
    with sqlite3.connect(catalog_path) as conn:  # every version's body and digest, in the one table
        rows = conn.execute("select kind, name, version, body, digest from catalog_items order by rowid").fetchall()
    assert [(k, n, v) for k, n, v, _, _ in rows][:4] == [("agent", "triage", "v-1"), ("agent", "triage", "v-2"),
                                                         ("agent", "triage", "v-3"), ("agent", "triage", "v-4")]
    assert all(d == hashlib.sha256(b.encode()).hexdigest() for _, _, _, b, d in rows)
    # opened again: nothing more to do, the same reads
    again, more = AgentCatalog(catalog_path), LearningStore(learnings_path, clock=lambda: LATER)
    assert _reads(again, more) == EXPECTED


def test_the_upgraded_catalog_goes_on_living(tmp_path):
    """Acts after the upgrade keep the rules: the pinned retired version stays blocked, a pending
    one is approved by someone else than its proposer or the person it was proposed for."""
    catalog_path, _ = _copied(tmp_path)
    catalog = AgentCatalog(catalog_path)
    with pytest.raises(Exception) as info:
        catalog.decide("triage", "v-3", approve=True, by="dan", note="")
    assert getattr(info.value, "code", "") == "caller_not_permitted"
    catalog.decide("triage", "v-3", approve=True, by="carol", note="")
    assert catalog.live_version("triage") == "v-3" and catalog.status("triage", "v-2") == "superseded"
    assert ("triage", "v-1") in catalog.blocked()[1]
    assert catalog.entries.live("skill", "default", "howto").version == "s-1"  # type: ignore[union-attr]


def test_a_read_only_open_upgrades_in_memory_only(tmp_path):
    catalog_path, learnings_path = _copied(tmp_path)
    before = _digest(catalog_path)
    catalog = AgentCatalog(catalog_path, read_only=True)
    assert _reads(catalog, LearningStore(learnings_path, clock=lambda: LATER)) == EXPECTED
    catalog.close()
    assert _digest(catalog_path) == before and _version(catalog_path) == 0
    assert OLD_TABLES <= _tables(catalog_path) and "catalog_items" not in _tables(catalog_path)


_KILLED = textwrap.dedent("""
    import os, signal, sys
    from checkpoint.policy import catalog_upgrade
    from checkpoint.policy.catalog import AgentCatalog
    steps = [0]
    real = catalog_upgrade._execute
    def step(conn, what):
        steps[0] += 1
        if steps[0] == int(sys.argv[2]):
            os.kill(os.getpid(), signal.SIGKILL)  # the process dies half-way through the upgrade
        real(conn, what)
    catalog_upgrade._execute = step
    AgentCatalog(sys.argv[1])
""")


@pytest.mark.parametrize("at", [2, 12, 25])
def test_a_process_killed_half_way_leaves_the_old_file(tmp_path, at):
    catalog_path, learnings_path = _copied(tmp_path)
    done = subprocess.run([sys.executable, "-c", _KILLED, str(catalog_path), str(at)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == -9, done.stderr  # killed, not finished
    assert _version(catalog_path) == 0 and OLD_TABLES <= _tables(catalog_path)
    assert "catalog_items" not in _tables(catalog_path)
    # the next open upgrades it whole
    assert _reads(AgentCatalog(catalog_path), LearningStore(learnings_path, clock=lambda: LATER)) == EXPECTED


def test_a_statement_that_fails_half_way_leaves_the_old_file(tmp_path):
    catalog_path, _ = _copied(tmp_path)
    with sqlite3.connect(catalog_path) as conn:  # a row with no tenant: the one table's key refuses it
        conn.execute("insert into entry_versions (kind, tenant, name, version, snapshot) "
                     "values ('skill', NULL, 'x', 'y', '{}')")
    conn.close()
    before = _digest(catalog_path)
    with pytest.raises(StoreSchemaMismatch) as info:
        AgentCatalog(catalog_path)
    assert info.value.code == STORE_SCHEMA and "left as it was" in str(info.value)
    assert _version(catalog_path) == 0 and OLD_TABLES <= _tables(catalog_path)
    assert "catalog_items" not in _tables(catalog_path)
    with sqlite3.connect(catalog_path) as conn:
        assert conn.execute("select count(*) from agent_versions").fetchone()[0] == 5
    conn.close()
    assert _digest(catalog_path) == before


def _half(path: Path, how: str) -> None:
    with sqlite3.connect(path) as conn:
        if how == "both shapes":
            conn.execute("create table catalog_items (kind text)")
        elif how == "heads only":
            conn.execute("create table catalog_heads (kind text)")
        elif how == "stamped, old tables":
            conn.execute("PRAGMA user_version = 1")
        elif how == "new tables, unstamped":
            for table in OLD_TABLES - {"policy_revisions"}:
                conn.execute(f"drop table {table}")
            conn.execute("create table catalog_items (kind text)")
    conn.close()


@pytest.mark.parametrize("how", ["both shapes", "heads only", "stamped, old tables", "new tables, unstamped"])
@pytest.mark.parametrize("read_only", [False, True])
def test_a_half_migrated_file_is_refused(tmp_path, how, read_only):
    catalog_path, _ = _copied(tmp_path)
    _half(catalog_path, how)
    before = _digest(catalog_path)
    with pytest.raises(StoreHalfMigrated) as info:
        AgentCatalog(catalog_path, read_only=read_only)
    assert info.value.code == STORE_HALF_MIGRATED == "store_half_migrated"
    assert _digest(catalog_path) == before


def test_a_half_migrated_learnings_file_is_refused(tmp_path):
    _, learnings_path = _copied(tmp_path)
    _half(learnings_path, "both shapes")
    with pytest.raises(StoreHalfMigrated):
        LearningStore(learnings_path)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_newer_file_is_refused(tmp_path, read_only):
    catalog_path, learnings_path = _copied(tmp_path)
    AgentCatalog(catalog_path).close()
    for path in (catalog_path, learnings_path):
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA user_version = 2")
        conn.close()
    before = _digest(catalog_path)
    with pytest.raises(StoreSchemaMismatch) as info:
        AgentCatalog(catalog_path, read_only=read_only)
    assert info.value.code == STORE_SCHEMA and "newer" in str(info.value)
    with pytest.raises(StoreSchemaMismatch):
        LearningStore(learnings_path)
    assert _digest(catalog_path) == before


def test_a_new_catalog_is_made_in_the_new_shape_and_stamped(tmp_path):
    AgentCatalog(tmp_path / "catalog.db").close()
    LearningStore(tmp_path / "learnings.db").close()
    assert _version(tmp_path / "catalog.db") == 1 and _version(tmp_path / "learnings.db") == 1
    assert _tables(tmp_path / "learnings.db") == {"catalog_items", "catalog_heads"}


# -- PostgreSQL -----------------------------------------------------------------------------------


@pytest.fixture
def db(pg_url, tmp_path):
    with Database(parse_store_url(pg_url, default_folder=tmp_path), name="test", max_size=4) as database:
        yield database


def _version_one(db: Database) -> None:
    """The catalog's schema at version 1, holding the fixture's rows as `warden store copy` of the
    release before put them there: table for table, in the order they were written."""
    migrate(db, Schema("catalog", SCHEMA.scripts[:1]))
    with db.transaction() as conn:
        for name in ("catalog_before.db", "learnings_before.db"):
            src = sqlite3.connect(FIXTURES / name)
            try:
                for (table,) in src.execute("select name from sqlite_master where type = 'table'").fetchall():
                    cursor = src.execute(f'select * from "{table}" order by rowid')
                    columns = [d[0] for d in cursor.description]
                    sql = (f"INSERT INTO checkpoint_{table} ({', '.join(columns)}) "
                           f"VALUES ({', '.join(['%s'] * len(columns))})")
                    for row in cursor.fetchall():
                        conn.execute(sql.encode(), list(row))
            finally:
                src.close()


def test_postgresql_version_one_migrates_and_reads_back_the_same(db):
    _version_one(db)
    assert migrate(db, SCHEMA) == (1, 2)
    catalog = AgentCatalog(store=PostgresqlStore(db, CATALOG))
    learnings = LearningStore(store=PostgresqlStore(db, LEARNINGS), clock=lambda: LATER)
    assert _reads(catalog, learnings) == EXPECTED
    with db.connection() as conn:
        tables = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'checkpoint_%'")}
        digests = conn.execute("SELECT count(*) FROM checkpoint_catalog_items WHERE body IS NOT NULL AND digest = "
                               "encode(sha256(convert_to(body, 'UTF8')), 'hex')").fetchone()[0]
        bodies = conn.execute("SELECT count(*) FROM checkpoint_catalog_items WHERE body IS NOT NULL").fetchone()[0]
    assert tables == {"checkpoint_catalog_items", "checkpoint_catalog_heads", "checkpoint_policy_revisions",
                      "checkpoint_catalog_changes"}
    assert digests == bodies > 0


def test_postgresql_migration_failing_half_way_changes_nothing(db):
    _version_one(db)
    with db.transaction() as conn:  # an entry's head on an agent's key: the last insert of the script fails
        conn.execute("INSERT INTO checkpoint_entry_live (kind, tenant, name, version, file_version) "
                     "VALUES ('agent', '', 'triage', 'x', 'x')")
    with pytest.raises(Exception, match="duplicate key"):
        migrate(db, SCHEMA)
    with db.connection() as conn:
        version = conn.execute("SELECT version FROM warden_schema WHERE component = 'catalog'").fetchone()[0]
        old = conn.execute("SELECT count(*) FROM checkpoint_agent_versions").fetchone()[0]
        new = conn.execute("SELECT to_regclass('checkpoint_catalog_items')").fetchone()[0]
    assert (version, old, new) == (1, 5, None)


def test_postgresql_newer_schema_is_refused(db):
    migrate(db, SCHEMA)
    with db.transaction() as conn:
        conn.execute("UPDATE warden_schema SET version = 3 WHERE component = 'catalog'")
    with pytest.raises(StoreSchemaMismatch, match="newer"):
        migrate(db, SCHEMA)


def test_an_old_data_folder_copies_into_postgresql_and_reads_back_the_same(db, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _copied(folder)
    before = _digest(folder / "catalog.db")
    migrate(db, SCHEMA)
    assert copy_folder(folder, db, [COPY], io.StringIO()) > 0
    assert _digest(folder / "catalog.db") == before  # SRC was upgraded in memory only
    catalog = AgentCatalog(store=PostgresqlStore(db, CATALOG))
    learnings = LearningStore(store=PostgresqlStore(db, LEARNINGS), clock=lambda: LATER)
    assert _reads(catalog, learnings) == EXPECTED


@pytest.mark.parametrize("how", ["both shapes", "newer"])
def test_warden_check_on_a_refused_catalog_says_so(tmp_path, capsys, how):
    from ckpt_helpers import FOLDERS

    from warden.cli import main

    data = tmp_path / "data"
    data.mkdir()
    catalog_path, _ = _copied(data)
    if how == "newer":
        with sqlite3.connect(catalog_path) as conn:
            conn.execute("PRAGMA user_version = 2")
        conn.close()
    else:
        _half(catalog_path, how)
    request = tmp_path / "req.json"
    request.write_text("{}")
    assert main(["check", "--policies", str(FOLDERS["engine"]), "--data", str(data), str(request)]) == 2
    err = capsys.readouterr().err
    assert "catalog.db" in err and ("half-way" if how == "both shapes" else "newer") in err and "Traceback" not in err


def test_a_learning_is_found_by_its_agent_whatever_its_spelling(tmp_path):
    """A learning's agent lives in its body: every spelling (a prefix of another, a quote, a
    backslash, non-ASCII) finds exactly its own learnings, in a new file and an upgraded one."""
    from checkpoint.policy.learnings import Proposal

    names = ["a7", "a70", 'a"7', "a\\7", "\u00e47", "a 7", "A7"]
    store = LearningStore(tmp_path / "learnings.db")
    for n in names:
        store.propose(Proposal("default", n, "v", "agent", "", f"text of {n}", by=n))
    for n in names:
        assert [r["agent"] for r in store.rows(agent=n)] == [n]
    store.close()
