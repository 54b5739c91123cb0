"""The contract of a catalog store (checkpoint/policy/catalog_store.py), for every backend.

Each test takes `store`, a fresh empty store of one backend: SQLite in memory, SQLite on a file,
and PostgreSQL (a fresh database of its own, migrated as `warden store migrate` does). Every test
here runs on each: the rows it keeps, the filters and orders it answers, the transaction that lands
whole or not at all, and then the catalog's and the learning store's own lives on top of it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from checkpoint.policy.catalog import AgentCatalog, CatalogError
from checkpoint.policy.catalog_store import INSERTED, CatalogStore, Not
from checkpoint.policy.entries import SKILL, Entry
from checkpoint.policy.learnings import LearningStore, Proposal
from checkpoint.policy.policyset import AgentVersion
from checkpoint.policy.postgresql_store import SCHEMA, PostgresqlStore
from checkpoint.policy.sqlite_store import SqliteStore
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

BACKENDS: dict[str, Callable[[Path], CatalogStore]] = {
    "sqlite-memory": lambda _tmp: SqliteStore(),
    "sqlite-file": lambda tmp: SqliteStore(tmp / "store.db"),
}
POSTGRESQL = "postgresql"  # a fresh database of its own (the pg_url fixture), migrated


@pytest.fixture(params=sorted([*BACKENDS, POSTGRESQL]))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CatalogStore]:
    if request.param == POSTGRESQL:
        url = parse_store_url(request.getfixturevalue("pg_url"), default_folder=tmp_path)
        with Database(url, name="test", max_size=4) as db:
            migrate(db, SCHEMA)
            made: CatalogStore = PostgresqlStore(db)
            yield made
            made.close()
        return
    made = BACKENDS[request.param](tmp_path)
    yield made
    made.close()


@pytest.fixture
def table(store: CatalogStore) -> CatalogStore:
    store.create_table("t", {"k": "text", "j": "text", "v": "text", "n": "integer", "f": "float"}, ("k", "j"))
    return store


def _keys(rows: list[dict]) -> list[tuple[str, str]]:
    return [(r["k"], r["j"]) for r in rows]


# -- rows ---------------------------------------------------------------------------------------


def test_a_table_is_made_once_and_known(store):
    assert not store.has_table("t")
    for _ in range(2):
        store.create_table("t", ("k", "v"), "k")
    assert store.has_table("t")
    store.add_column("t", "w")
    store.add_column("t", "w")  # a column already there is left as it is
    with store.transaction():
        store.insert("t", {"k": "1", "v": "a", "w": "b"})
    assert store.rows("t") == [{"k": "1", "v": "a", "w": "b"}]


def test_values_come_back_with_their_types(table):
    with table.transaction():
        table.insert("t", {"k": "a", "j": "1", "v": None, "n": 3, "f": 2.5})
    assert table.rows("t") == [{"k": "a", "j": "1", "v": None, "n": 3, "f": 2.5}]


def test_insert_refuses_a_key_that_is_there_and_insert_ignore_keeps_the_first(table):
    with table.transaction():
        table.insert("t", {"k": "a", "j": "1", "v": "first"})
    with pytest.raises(Exception), table.transaction():  # noqa: B017 - each backend raises its own kind
        table.insert("t", {"k": "a", "j": "1", "v": "second"})
    with table.transaction():
        table.insert_ignore("t", [{"k": "a", "j": "1", "v": "third"}, {"k": "b", "j": "1", "v": "b"}])
    assert [r["v"] for r in table.rows("t", order=("k",))] == ["first", "b"]


def test_upsert_sets_the_given_columns_and_keeps_the_others(table):
    with table.transaction():
        table.upsert("t", {"k": "a", "j": "1", "v": "x", "n": 1}, ("k", "j"))
        table.upsert("t", {"k": "a", "j": "1", "v": "y"}, ("k", "j"))
    assert [(r["v"], r["n"]) for r in table.rows("t")] == [("y", 1)]
    with pytest.raises(ValueError):  # a missing key would add a row, never update one
        table.upsert("t", {"k": "a", "v": "z"}, ("k", "j"))


def test_update_changes_one_row_or_says_there_is_none(table):
    with table.transaction():
        table.insert("t", {"k": "a", "j": "1", "v": "x"})
        table.update("t", ("k", "j"), ("a", "1"), {"v": "y"})
    assert table.rows("t")[0]["v"] == "y"
    with pytest.raises(LookupError):
        table.update("t", ("k", "j"), ("missing", "1"), {"v": "z"})


def test_filters_equal_one_of_and_not(table):
    with table.transaction():
        for k, v in (("a", "x"), ("b", "y"), ("c", ""), ("d", None)):
            table.insert("t", {"k": k, "j": "1", "v": v})
    assert _keys(table.rows("t", {"v": "x"})) == [("a", "1")]
    for many in (["x", "y"], ("x", "y"), {"x", "y"}, frozenset({"x", "y"})):
        assert sorted(_keys(table.rows("t", {"v": many}))) == [("a", "1"), ("b", "1")]
    # a NULL column matches neither `= value` nor `Not(value)`
    assert sorted(_keys(table.rows("t", {"v": Not("")}))) == [("a", "1"), ("b", "1")]
    assert _keys(table.rows("t", {"v": "x", "k": Not("a")})) == []


def test_orders_and_limits(table):
    with table.transaction():
        for k, n in (("b", 2), ("c", 1), ("a", 2)):
            table.insert("t", {"k": k, "j": "1", "n": n})
    assert [r["k"] for r in table.rows("t", order=("k",))] == ["a", "b", "c"]
    assert [r["k"] for r in table.rows("t", order=("-n", "k"))] == ["a", "b", "c"]
    assert [r["k"] for r in table.rows("t", order=("n", INSERTED))] == ["c", "b", "a"]
    assert [r["k"] for r in table.rows("t", order=("-" + INSERTED,))] == ["a", "c", "b"]
    assert [r["k"] for r in table.rows("t", order=("k",), limit=2)] == ["a", "b"]


def test_a_transaction_that_fails_half_way_writes_nothing(table):
    with pytest.raises(LookupError), table.transaction():
        table.upsert("t", {"k": "a", "j": "1", "v": "written"}, ("k", "j"))
        table.update("t", ("k", "j"), ("missing", "1"), {"v": "x"})
    assert table.rows("t") == []


def test_the_lock_is_reentrant(store):
    with store.lock, store.lock:
        store.create_table("t", ("k",), "k")


# -- the stores above it ------------------------------------------------------------------------


def _agent(version: str, persona: str) -> AgentVersion:
    snap = {"name": "triage", "tenant": "default", "persona": persona, "description": "", "wildcard": False,
            "tools": ["read_doc"], "delegates": [], "scope": {}, "budget": {}}
    return AgentVersion.from_snapshot(version, snap)


def test_an_agent_versions_life_on_the_store(store):
    catalog = AgentCatalog(store=store)
    live = _agent("v-1", "a triage agent")
    catalog.record([live], "rev-1")
    catalog.settle({"triage": live}, {}, {})
    assert catalog.live_version("triage") == "v-1" and catalog.first_install() is False
    catalog.propose(_agent("v-2", "a bolder triage agent"), by="bob", source="api", note="")
    with pytest.raises(CatalogError) as info:
        catalog.decide("triage", "v-2", approve=True, by="bob", note="")
    assert info.value.code == "caller_not_permitted"
    catalog.decide("triage", "v-2", approve=True, by="carol", note="")
    catalog.retire("triage", "v-1", by="carol", note="")
    assert catalog.live_version("triage") == "v-2"
    assert [(r["version"], r["status"]) for r in catalog.history("triage")] == [("v-1", "retired"), ("v-2", "live")]
    assert catalog.blocked() == (frozenset({("triage", "v-1")}), frozenset({("triage", "v-1")}))
    fresh = AgentCatalog(store=store)  # another process on the same rows: nothing in its memory
    assert fresh.get("triage", "v-1") == live and fresh.versions("triage") == ["v-1", "v-2"]


def test_a_skills_life_on_the_store(store):
    entries = AgentCatalog(store=store).entries
    skill = Entry(SKILL, "default", "howto", "s-1", "how to triage", {"text": "read first"})
    entries.propose(skill, by="bob", source="api", note="")
    assert entries.summaries(SKILL) == [{"tenant": "default", "name": "howto", "live_version": "",
                                         "pending_versions": ["s-1"], "description": ""}]
    entries.decide(SKILL, "default", "howto", "s-1", approve=True, by="carol", note="")
    assert entries.live(SKILL, "default", "howto") == skill
    assert [e.name for e in entries.live_entries(SKILL, "default")] == ["howto"]


def test_a_learnings_life_on_the_store(store):
    now = [1_000_000.0]
    learnings = LearningStore(store=store, clock=lambda: now[0], stale_after_days=1)
    proposal = Proposal("default", "triage", "v-1", "breaker", "turns", "too many turns", by="driver")
    _, row = learnings.propose(proposal)
    learnings.propose(proposal)  # the same occurrence counts on the open learning
    assert learnings.get(row["id"])["occurrences"] == 2
    learnings.act(row["id"], "promote", by="carol", severity="warning", match="true")
    assert [r["id"] for r in learnings.acting()] == [row["id"]]
    learnings.triggered([row["id"]])
    learnings.flush()
    assert learnings.get(row["id"])["triggers"] == 1
    now[0] += 2 * 86400
    assert [c.learning for c in learnings.sweep()] == [row["id"]]
    assert learnings.rows(status="stale")[0]["id"] == row["id"] and learnings.acting() == []


# -- who opens the databases --------------------------------------------------------------------

# The modules of `checkpoint/` that may import sqlite3: the store's SQLite implementation, and
# those of the other databases (the decision log, the single-use store). The command line imports
# it for its error type only, to report a file that is no catalog.
# the other stores' SQLite modules, and `warden store copy`'s readers of a SQLite data folder
OTHER_DATABASES = {"checkpoint/audit", "checkpoint/server/single_use.py", "checkpoint/cli.py",
                   "checkpoint/server/single_use_copy.py", "checkpoint/server/limit_store.py",
                   "checkpoint/server/limit_copy.py"}
# the catalog's own: its store, and the copy that reads its SQLite files into PostgreSQL
CATALOG_STORE_MODULES = {"checkpoint/policy/sqlite_store.py", "checkpoint/policy/catalog_copy.py"}


def test_nothing_outside_the_store_module_opens_the_catalog_or_the_learnings():
    root = Path(__file__).resolve().parents[2]
    importers = set()
    for path in (root / "checkpoint").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] in ("sqlite3", "sqlite_utils") for n in names):
                importers.add(path.relative_to(root).as_posix())
    others = {p for p in importers if not any(p == o or p.startswith(o + "/") for o in OTHER_DATABASES)}
    assert others == CATALOG_STORE_MODULES
