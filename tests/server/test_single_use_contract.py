"""The single-use store's contract, on both backends: SQLite files beside one checkpoint, and the
PostgreSQL database a fleet of replicas shares. Two stores opened on the same backing are two
workers of one data folder, or two replicas of one fleet."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from checkpoint.server.ended_runs_feed import MAX_AGE, TABLE, EndedRunsFeed
from checkpoint.server.single_use import SingleUse, SingleUseStore
from checkpoint.server.stores import open_stores, store_url
from warden.store.errors import StoreSchemaMismatch, StoreUnavailable
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store_cli import schemas

Opener = Callable[[], SingleUseStore]


def migrate_all(db) -> None:
    """As `warden store migrate` does: a checkpoint opens its stores only on every schema it uses."""
    for schema in schemas():
        migrate(db, schema)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def open_store(request, backend, tmp_path) -> Iterator[Opener]:
    """Opens one more store on the same backing (a file; a database)."""
    opened: list[Callable[[], None]] = []
    if backend == "sqlite":
        def opener() -> SingleUseStore:
            store = SingleUse(tmp_path / "approvals-used.db")
            opened.append(store.close)
            return store
    else:
        url = store_url(request.getfixturevalue("pg_url"), tmp_path)
        with Database(url, name="test", max_size=1) as db:
            migrate_all(db)

        def opener() -> SingleUseStore:
            stores = open_stores(url, run_token_ttl=3600)
            opened.append(stores.close)
            return stores.single_use
    yield opener
    for close in opened:
        close()


def test_a_key_is_taken_once_and_given_back_only_by_its_holder(open_store):
    store = open_store()
    assert store.claim("decision-1", "used by run a") is None
    assert store.claim("decision-1", "used by run b") == "used by run a"
    assert store.used_by("decision-1") == "used by run a"
    assert store.used_by("decision-2") is None
    store.release("decision-1", "used by run b")  # not the holder: nothing changes
    assert store.used_by("decision-1") == "used by run a"
    store.release("decision-1", "used by run a")
    assert store.used_by("decision-1") is None
    assert store.claim("decision-1", "used by run b") is None


def test_one_key_claimed_at_once_from_two_stores_is_taken_by_exactly_one_caller(open_store):
    stores = [open_store(), open_store()]
    barrier = threading.Barrier(16)
    won: list[int] = []

    def claim(i: int) -> None:
        barrier.wait()
        if stores[i % 2].claim("approval-x", f"caller {i}") is None:
            won.append(i)

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert stores[1].used_by("approval-x") == f"caller {won[0]}"


def test_keys_postgresql_cannot_hold_stay_distinct(open_store):
    store = open_store()
    assert store.claim("act:run:a\x00b", "first") is None
    assert store.claim("act:run:a\\0b", "second") is None  # what a careless escape would make of the first
    assert store.claim("act:run:a\x00b", "third") == "first"


def test_a_run_ends_once_and_its_first_end_stays(open_store):
    store = open_store()
    assert store.ended(["run-1"]) is None
    assert store.ended([]) is None and store.ended(["", ""]) is None
    store.end_run("run-1", "cancelled by alice")
    store.end_run("run-1", "its end: succeeded (done)")
    assert store.ended(["run-1"]) == ("run-1", "cancelled by alice")
    # any of the ids: a run is ended when it, or a run it descends from, ended
    assert store.ended(["child-of-1", "", "run-1"]) == ("run-1", "cancelled by alice")
    assert store.ended(["run-2", "root-2"]) is None


def test_an_end_at_one_store_binds_the_other_within_a_second(open_store):
    a, b = open_store(), open_store()
    assert b.ended(["run-9"]) is None
    a.end_run("run-9", "cancelled by carol")
    assert a.ended(["run-9"]) == ("run-9", "cancelled by carol")  # its own end: at once
    took = _until_ended(b, "run-9")
    assert took <= MAX_AGE + 0.2, took


def _until_ended(store: SingleUseStore, run_id: str, limit: float = 5.0) -> float:
    began = time.monotonic()
    while store.ended([run_id]) is None:
        assert time.monotonic() - began < limit, f"{run_id} not seen ended after {limit}s"
        time.sleep(0.02)
    return time.monotonic() - began


# -- PostgreSQL only: the replica's memory of ended runs ------------------------------------------


@pytest.fixture
def pg_stores(request, tmp_path) -> Iterator[tuple[SingleUseStore, SingleUseStore, str]]:
    pg_url = request.getfixturevalue("pg_url")
    url = store_url(pg_url, tmp_path)
    with Database(url, name="test", max_size=1) as db:
        migrate_all(db)
    a, b = open_stores(url, run_token_ttl=3600), open_stores(url, run_token_ttl=3600)
    try:
        yield a.single_use, b.single_use, pg_url
    finally:
        a.close()
        b.close()


def _sql(pg_url: str, statement: str, *params: object) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(statement, params or None)


def test_an_end_whose_notification_never_came_is_found_by_the_poll(pg_stores):
    a, b, pg_url = pg_stores
    _sql(pg_url, f"ALTER TABLE {TABLE} DISABLE TRIGGER USER")  # no notification from here on
    _sql(pg_url, f"INSERT INTO {TABLE} (run_id, how) VALUES ('run-quiet', 'cancelled by dana')")
    assert _until_ended(b, "run-quiet") <= MAX_AGE + 0.2
    assert b.ended(["run-quiet"]) == ("run-quiet", "cancelled by dana")


def test_an_end_committed_after_a_later_one_is_not_skipped(pg_stores):
    a, b, pg_url = pg_stores
    _sql(pg_url, f"ALTER TABLE {TABLE} DISABLE TRIGGER USER")  # polls only
    with psycopg.connect(pg_url) as slow:  # its transaction id is drawn first, its commit comes last
        slow.execute(f"INSERT INTO {TABLE} (run_id, how) VALUES ('run-early', 'cancelled')")
        _sql(pg_url, f"INSERT INTO {TABLE} (run_id, how) VALUES ('run-late', 'cancelled')")
        _until_ended(b, "run-late")
        time.sleep(0.5)  # polls run while the first is still open
        assert b.ended(["run-early"]) is None
        slow.commit()
    assert _until_ended(b, "run-early") <= MAX_AGE + 0.2


def test_the_database_gone_refuses_and_its_return_needs_no_reopening(pg_server, pg_stores):
    a, b, _url = pg_stores
    a.end_run("run-before", "cancelled by erin")
    _until_ended(b, "run-before")
    pg_server.stop()
    try:
        time.sleep(MAX_AGE + 0.3)
        with pytest.raises(StoreUnavailable, match="the ended runs cannot be read"):
            b.ended(["run-other"])
        with pytest.raises(StoreUnavailable):  # even for a run it knows ended: it cannot tell what else did
            b.ended(["run-before"])
        with pytest.raises(StoreUnavailable):
            a.claim("approval-y", "used by run r")
        with pytest.raises(StoreUnavailable):
            a.end_run("run-z", "cancelled")
    finally:
        pg_server.start()
    deadline = time.monotonic() + 15
    while True:
        try:
            assert b.ended(["run-other"]) is None
            break
        except StoreUnavailable:
            assert time.monotonic() < deadline, "the store did not come back after the database did"
            time.sleep(0.2)
    assert b.ended(["run-before"]) == ("run-before", "cancelled by erin")
    assert a.claim("approval-y", "used by run r") is None


def test_a_store_without_its_schema_does_not_open(pg_url, tmp_path):
    with pytest.raises(StoreSchemaMismatch, match="warden store migrate"):
        open_stores(store_url(pg_url, tmp_path), run_token_ttl=3600)


def test_ends_older_than_the_horizon_are_neither_loaded_nor_kept(pg_url, tmp_path):
    """Memory stays bounded: an end older than every token of its run could be is forgotten."""
    url = store_url(pg_url, tmp_path)
    with Database(url, name="test", max_size=2) as db:
        migrate_all(db)
        _sql(pg_url, f"INSERT INTO {TABLE} (run_id, how, at) VALUES ('run-old', 'cancelled', now() - interval '1 hour')")
        _sql(pg_url, f"INSERT INTO {TABLE} (run_id, how) VALUES ('run-new', 'cancelled')")
        feed = EndedRunsFeed(db, horizon=2.0, prune_every=0.0).start()
        try:
            assert feed.ended(["run-old"]) is None
            assert feed.ended(["run-new"]) == ("run-new", "cancelled")
            deadline = time.monotonic() + 10
            while feed.ended(["run-new"]) is not None:  # two seconds on, it is older than the horizon
                assert time.monotonic() < deadline, "an end older than the horizon is still kept"
                time.sleep(0.1)
        finally:
            feed.close()
