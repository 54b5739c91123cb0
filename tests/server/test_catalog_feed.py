"""The catalog feed on a real PostgreSQL (checkpoint/server/catalog_feed.py): a write to what is in
force wakes every follower through its notification, long before the next poll; without the
notification the poll finds it; and a follower that cannot refresh does not call itself current."""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from checkpoint.policy.catalog_items import items
from checkpoint.policy.postgresql_store import CATALOG, CHANGES, LEARNINGS, SCHEMA, PostgresqlStore
from checkpoint.server.catalog_feed import CatalogFeed
from warden.store.errors import StoreUnavailable
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url


@pytest.fixture
def db(pg_url, tmp_path) -> Iterator[Database]:
    with Database(parse_store_url(pg_url, default_folder=tmp_path), name="test", max_size=4) as database:
        migrate(database, SCHEMA)
        yield database


def _feed(db: Database, refreshed: list[float], **kwargs) -> CatalogFeed:
    return CatalogFeed(db, **kwargs).start(lambda: refreshed.append(time.monotonic()))


def _write(db: Database, store: str, version: str) -> float:
    """One act's write at "another replica": a live version, or a learning."""
    rows = items(PostgresqlStore(db, store))  # the tables the stores speak of (catalog_items.py)
    with rows.transaction():
        if store == CATALOG:
            rows.upsert("agent_live", {"agent": "triage", "version": version, "file_version": version}, "agent")
        else:
            rows.upsert("learnings", {"id": version, "tenant": "acme", "status": "active"}, "id")
    return time.monotonic()


def _waited(refreshed: list[float], count: int, within: float) -> bool:
    deadline = time.monotonic() + within
    while len(refreshed) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(refreshed) >= count


@pytest.mark.parametrize("store", [CATALOG, LEARNINGS])
def test_a_notification_brings_a_write_long_before_the_poll(db, store):
    refreshed: list[float] = []
    feed = _feed(db, refreshed, poll_interval=30.0, max_age=60.0)
    try:
        assert len(refreshed) == 1  # at start
        time.sleep(0.2)  # the follower is listening
        written = _write(db, store, "v-2")
        assert _waited(refreshed, 2, 1.0), "no refresh within a second of the write: was it notified?"
        assert refreshed[1] - written < 1.0
    finally:
        feed.close()


def test_without_the_notification_only_the_poll_brings_a_write(db, pg_url):
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {CHANGES} DISABLE TRIGGER {CHANGES}_notify")
    slow: list[float] = []
    polled: list[float] = []
    feeds = [_feed(db, slow, poll_interval=30.0, max_age=60.0), _feed(db, polled, poll_interval=0.25)]
    try:
        time.sleep(0.2)
        _write(db, CATALOG, "v-2")
        assert _waited(polled, 2, 1.0), "the poll did not find the write within a second"
        assert not _waited(slow, 2, 0.5), "a write was notified with the notifying trigger disabled"
    finally:
        for feed in feeds:
            feed.close()


def test_a_follower_that_cannot_refresh_is_not_current_and_says_so(db):
    told: list[bool] = []
    failing = [False]

    def refresh() -> None:
        if failing[0]:
            raise StoreUnavailable("the learnings cannot be read")

    feed = CatalogFeed(db, poll_interval=0.05, max_age=0.3, on_current=told.append).start(refresh)
    try:
        feed.require_current()
        assert feed.current and told == [True]
        failing[0] = True
        _write(db, LEARNINGS, "lrn-1")
        deadline = time.monotonic() + 3
        while feed.current:
            assert time.monotonic() < deadline, "a follower whose refresh fails still calls itself current"
            time.sleep(0.02)
        with pytest.raises(StoreUnavailable, match="learnings cannot be read"):
            feed.require_current()
        assert told[-1] is False
        failing[0] = False  # the store answers again: current again, with no restart
        deadline = time.monotonic() + 3
        while not feed.current:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        feed.require_current()
        assert told[-1] is True
    finally:
        feed.close()
