"""The limits' store contract, on both backends: the SQLite file beside one checkpoint and the
PostgreSQL database a fleet shares. Two stores opened on the same backing are two workers of one data
folder, or two replicas of one fleet."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from checkpoint.server.limit_store import LIMITS_FILE, Bucket, Increment, LimitStore, SqliteLimits
from checkpoint.server.stores import open_stores, store_url
from warden.store.pg import Database

from .test_single_use_contract import migrate_all

Opener = Callable[[], LimitStore]
HOUR = 3600
A = Bucket("fetch_hourly", "principal:driver", 7200)


def inc(bucket: Bucket = A, amount: int = 1, most: int = 3) -> Increment:
    return Increment(bucket, amount, most, bucket.window_start + HOUR)


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request, tmp_path) -> Iterator[Opener]:
    closing: list[Callable[[], None]] = []
    if request.param == "sqlite":
        def opener() -> LimitStore:
            store = SqliteLimits(tmp_path / LIMITS_FILE)
            closing.append(store.close)
            return store
    else:
        url = store_url(request.getfixturevalue("pg_url"), tmp_path)
        with Database(url, name="test", max_size=1) as db:
            migrate_all(db)

        def opener() -> LimitStore:
            stores = open_stores(url, run_token_ttl=3600)
            closing.append(stores.close)
            assert stores.limits is not None
            return stores.limits
    yield opener
    for close in closing:
        close()


def test_a_count_adds_only_while_it_stays_within_its_max(open_store):
    store = open_store()
    assert store.used([A]) == {}
    for expected in (1, 2, 3):
        assert store.count([inc()], now=7200) == (None, {A: expected})
    assert store.count([inc()], now=7200) == (A, {})  # the fourth has no room: nothing added
    assert store.used([A]) == {A: 3}
    assert store.count([inc(amount=4, most=3)], now=7200).missed == A  # more than a whole window holds


def test_an_amount_larger_than_the_room_left_is_refused_whole(open_store):
    store = open_store()
    assert store.count([inc(amount=5, most=8)], now=0).missed is None
    assert store.count([inc(amount=4, most=8)], now=0).missed == A  # 5 + 4 > 8: not a part of it either
    assert store.used([A]) == {A: 5}
    assert store.count([inc(amount=3, most=8)], now=0).totals == {A: 8}


def test_the_counts_of_one_call_are_added_all_or_none(open_store):
    store = open_store()
    tenant = Bucket("tenant_daily", "tenant:acme", 0)
    assert store.count([inc(tenant, most=1)], now=0).missed is None  # the tenant's limit is full now
    assert store.count([inc(A), inc(tenant, most=1)], now=0).missed == tenant
    assert store.used([A, tenant]) == {tenant: 1}  # the principal's count was not kept either


def test_keys_limits_and_windows_are_counted_apart(open_store):
    store = open_store()
    others = [Bucket("fetch_hourly", "principal:batch", 7200), Bucket("fetch_hourly", "tenant:driver", 7200),
              Bucket("other", "principal:driver", 7200), Bucket("fetch_hourly", "principal:driver", 10800),
              Bucket("fetch_hourly", "principal:Driver", 7200), Bucket("fetch_hourly", "principal:driver\x00x", 7200),
              Bucket("fetch_hourly", "principal:driver\\0x", 7200)]
    assert store.count([inc(A, most=1)], now=0).missed is None
    for bucket in others:
        assert store.count([inc(bucket, most=1)], now=0).missed is None, bucket
    assert store.used([A, *others]) == {b: 1 for b in (A, *others)}


def test_a_refund_gives_back_what_was_counted_and_never_goes_below_zero(open_store):
    store = open_store()
    store.count([inc(amount=2, most=3)], now=0)
    store.refund([inc(amount=2, most=3)])
    assert store.used([A]) == {A: 0}
    store.refund([inc(amount=2, most=3)])
    assert store.used([A]) == {A: 0}
    assert store.count([inc(amount=3, most=3)], now=0).missed is None


def test_two_stores_at_max_minus_one_let_exactly_one_caller_count(open_store):
    stores = [open_store(), open_store()]
    assert stores[0].count([inc(amount=4, most=5)], now=0).missed is None
    barrier = threading.Barrier(16)
    won: list[int] = []

    def count(i: int) -> None:
        barrier.wait()
        if stores[i % 2].count([inc(most=5)], now=0).missed is None:
            won.append(i)

    threads = [threading.Thread(target=count, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert stores[1].used([A]) == {A: 5}


def test_windows_long_over_are_deleted_when_a_count_is_made(open_store):
    store = open_store()
    old = Bucket("fetch_hourly", "principal:driver", 0)
    store.count([inc(old)], now=0)
    store._pruned = 0.0  # type: ignore[attr-defined]  # the next count may prune
    recent = Bucket("fetch_hourly", "principal:driver", 9 * HOUR)  # its window ended an hour ago: kept
    store.count([inc(recent)], now=11 * HOUR)
    assert store.used([old, recent]) == {recent: 1}
