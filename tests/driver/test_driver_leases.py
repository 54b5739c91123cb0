"""The lease watch of durable drivers (driver/durable/leases.py) on a real PostgreSQL: who is
judged dead, by whom, and when nobody may judge. No DBOS here: recovery is a callback that counts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import psycopg
import pytest

from driver.durable.leases import Leases, application_name, new_executor_id
from driver.runs.postgresql import SCHEMA
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

TTL = 0.5


@pytest.fixture()
def db(pg_url: str) -> Iterator[Database]:
    url = parse_store_url(pg_url, default_folder=".")
    with Database(url, name="test-leases", max_size=4) as database:
        migrate(database, SCHEMA)
        yield database


class Node:
    def __init__(self, db: Database, executor_id: str = "", left: list[int] | None = None) -> None:
        self.recovered: list[str] = []
        self.fenced: list[bool] = []
        self._left = left if left is not None else []

        def recover(executor_id: str) -> int:
            self.recovered.append(executor_id)
            return self._left.pop(0) if self._left else 0

        self.lease = Leases(db, executor_id or new_executor_id(), "v1", ttl_seconds=TTL, recover=recover,
                            on_fenced=lambda: self.fenced.append(True))
        self.lease.register()
        self.lease.renew()


def past_ttl(*renewing: Node) -> None:
    """Let more than a TTL pass by the database's clock while `renewing` keep renewing."""
    end = time.monotonic() + TTL * 1.5
    while time.monotonic() < end:
        for n in renewing:
            assert n.lease.renew()
        time.sleep(TTL / 10)


def dead(db: Database) -> list[str]:
    with db.connection() as conn:
        return [r[0] for r in conn.execute("SELECT executor_id FROM driver_leases WHERE dead ORDER BY 1")]


def test_a_stale_lease_is_judged_once_and_its_owner_is_fenced(db):
    a, b, c = Node(db), Node(db), Node(db)
    past_ttl(b, c)  # A stops renewing (killed, frozen, cut off)
    got = [b.lease.judge(), c.lease.judge()]  # two judges: the conditional UPDATE lets one mark it
    assert sorted(got, key=len) == [[], [a.lease.executor_id]]
    assert dead(db) == [a.lease.executor_id]
    assert a.lease.renew() is False and a.fenced == [True]  # a dead lease is never renewed
    assert a.lease.renew() is False and a.fenced == [True]  # ... and fencing is told once
    assert dead(db) == [a.lease.executor_id]


def test_nobody_judges_before_renewing_its_own_lease_for_a_full_ttl(db):
    a = Node(db)
    past_ttl()
    late = Node(db)  # started after A went quiet: A looks stale, but `late` has not earned a judgement
    assert late.lease.may_judge() is False and late.lease.judge() == []
    past_ttl(late)
    assert late.lease.judge() == [a.lease.executor_id]


def test_an_outage_of_the_database_makes_nobody_look_dead(db, pg_server):
    a, b = Node(db), Node(db)
    past_ttl(a, b)
    assert b.lease.may_judge()
    pg_server.stop()
    try:
        time.sleep(TTL * 2)  # every lease goes stale while the database is away
        b.lease.beat()  # fails: the judge loses its standing
    finally:
        pg_server.start()
    end = time.monotonic() + 60
    while not b.lease.renewed_since_failure:  # back: B renews first, and finds A stale
        assert time.monotonic() < end, "the lease was never renewed after the outage"
        b.lease.beat()
        time.sleep(0.1)
    assert dead(db) == []
    assert b.lease.may_judge() is False
    past_ttl(a, b)  # both renewed a full TTL after the outage: both alive
    assert b.lease.judge() == [] and dead(db) == []


def test_recovery_is_retried_until_nothing_of_the_dead_executor_is_pending(db):
    a, b = Node(db), Node(db, left=[2, 1, 0])
    past_ttl(b)
    assert b.lease.judge() == [a.lease.executor_id]
    assert b.lease.take_over() == {a.lease.executor_id: 2}
    assert dead(db) == [a.lease.executor_id]  # still listed: runs of it are pending
    assert b.lease.take_over() == {a.lease.executor_id: 1}
    assert b.lease.take_over() == {a.lease.executor_id: 0}
    assert dead(db) == [] and b.recovered == [a.lease.executor_id] * 3
    assert a.lease.renew() is False  # its row is gone: still never renewed


def test_an_executor_id_is_one_per_process_start_and_never_taken_over(db):
    assert len({new_executor_id() for _ in range(50)}) == 50
    a = Node(db)
    with pytest.raises(ValueError, match="one per process start"):
        Node(db, executor_id=a.lease.executor_id)
    past_ttl()
    Node(db)  # judged by someone below: the reused id still cannot come back to life
    judge = Node(db)
    past_ttl(judge)
    assert a.lease.executor_id in judge.lease.judge()
    with pytest.raises(ValueError):
        Node(db, executor_id=a.lease.executor_id)


def test_a_judge_ends_the_dead_drivers_sessions(db):
    a, b = Node(db), Node(db)
    held = psycopg.connect(db.url.conninfo, autocommit=True,
                           application_name=application_name("driver", a.lease.executor_id))
    other = psycopg.connect(db.url.conninfo, autocommit=True, application_name=application_name("driver", "x" + a.lease.executor_id))
    try:
        held.execute("SELECT pg_advisory_lock(42)")  # as a frozen driver holds a run's lock
        past_ttl(b)
        assert b.lease.judge() == [a.lease.executor_id]
        with pytest.raises(psycopg.OperationalError):
            held.execute("SELECT 1")
        other.execute("SELECT 1")  # an id that only ends with the dead one's is another driver
    finally:
        held.close()
        other.close()


def test_a_lease_ttl_must_be_positive(db):
    with pytest.raises(ValueError):
        Leases(db, new_executor_id(), "v1", ttl_seconds=0, recover=lambda _e: 0, on_fenced=lambda: None)
