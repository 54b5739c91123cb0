"""What only the shared store has: a database that goes away and comes back, the schema a toolrunner
checks at start, and the instance name that one live toolrunner holds. A real PostgreSQL."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from toolrunner.receipts.held import HeldReceipts
from toolrunner.receipts.postgresql import SCHEMA, InstanceInUse, PostgresReceipts, open_postgresql
from warden.codes import STORE_UNAVAILABLE
from warden.store.errors import StoreSchemaMismatch, StoreUnavailable
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import StoreUrl, parse_store_url
from warden.toolrunner.v1 import toolrunner_pb2 as pb

BOUND = 20.0  # seconds: only turns a store that never comes back into a failure


def _migrated(pg_url: str) -> StoreUrl:
    url = parse_store_url(pg_url, default_folder="/unused")
    with Database(url, name="migrate", max_size=1) as db:
        migrate(db, SCHEMA)
    return url


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND
    while True:
        try:
            if check():
                return
        except StoreUnavailable:
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_the_database_gone_refuses_claims_with_the_code_and_its_return_needs_no_restart(pg_server, pg_url) -> None:
    store = PostgresReceipts(Database(_migrated(pg_url), name="test", pool_timeout=0.5).open(), instance="tr-a")
    try:
        assert store.claim("d-before", "run", "tool")
        pg_server.stop()
        try:
            with pytest.raises(StoreUnavailable) as refused:
                store.claim("d-while-down", "run", "tool")
            assert refused.value.code == STORE_UNAVAILABLE
            with pytest.raises(StoreUnavailable):
                store.get("d-before")
            assert not store.ping()
        finally:
            pg_server.start()
        _until(lambda: store.claim("d-after", "run", "tool"), "the store did not come back after the database did")
        assert store.get("d-while-down") is None  # the refused claim left nothing behind
        assert store.get("d-before") == ("running", None)
    finally:
        store.close()


def test_a_receipt_the_store_cannot_take_is_kept_and_written_when_it_is_back(pg_server, pg_url) -> None:
    backend = PostgresReceipts(Database(_migrated(pg_url), name="test", pool_timeout=0.5).open(), instance="tr-a")
    store = HeldReceipts(backend, retry_seconds=0.2)
    try:
        assert store.claim("d1", "run", "tool")
        receipt = pb.Receipt(decision_id="d1", run_id="run", tool="tool", exit_code=0, output="ran while it was gone")
        pg_server.stop()
        try:
            store.finish(receipt)  # the call ran: its receipt is not lost with the database
            state, kept = store.get("d1")  # type: ignore[misc]
            assert state == "done" and kept == receipt
            assert store.held() == ["d1"]
        finally:
            pg_server.start()
        _until(lambda: store.held() == [], "the kept receipt was never written")
        state, written = backend.get("d1")  # type: ignore[misc]
        assert state == "done" and written == receipt
    finally:
        store.close()


def test_a_receipt_still_kept_when_the_toolrunner_stops_leaves_its_call_interrupted(pg_server, pg_url) -> None:
    url = _migrated(pg_url)
    store = HeldReceipts(PostgresReceipts(Database(url, name="test", pool_timeout=0.5).open(), instance="tr-a"))
    assert store.claim("d1", "run", "tool")
    pg_server.stop()
    try:
        store.finish(pb.Receipt(decision_id="d1", run_id="run", tool="tool", output="lost with the process"))
        store.close()  # the database is still gone: the output is lost, the claim is not
    finally:
        pg_server.start()
    again = PostgresReceipts(Database(url, name="test").open(), instance="tr-a")
    try:
        _until(lambda: again.ping(), "the database did not come back")
        assert again.interrupt_cut_off() == ["d1"]  # the instance starting again: never run twice
        state, receipt = again.get("d1")  # type: ignore[misc]
        assert state == "done" and receipt is not None and receipt.code == "interrupted"
    finally:
        again.close()


def test_a_toolrunner_starts_only_on_the_schema_it_knows(pg_url) -> None:
    url = parse_store_url(pg_url, default_folder="/unused")
    with pytest.raises(StoreSchemaMismatch, match="warden store migrate"):
        open_postgresql(url, instance="tr-a")
    _migrated(pg_url)
    store, lock = open_postgresql(url, instance="tr-a")
    store.close()
    lock.release()


def test_an_instance_name_is_held_by_one_live_toolrunner(pg_url) -> None:
    url = _migrated(pg_url)
    store, lock = open_postgresql(url, instance="tr-a")
    try:
        with pytest.raises(InstanceInUse, match="'tr-a' is running elsewhere") as refused:
            open_postgresql(url, instance="tr-a")
        assert refused.value.code == "instance_in_use"
        other, other_lock = open_postgresql(url, instance="tr-b")  # another name: its own toolrunner
        other.close()
        other_lock.release()
    finally:
        store.close()
        lock.release()
    again, again_lock = open_postgresql(url, instance="tr-a")  # the name is free once its holder stops
    again.close()
    again_lock.release()


def _terminate_lock_backend(url: StoreUrl, instance: str) -> int:
    """Kill, from another connection, the session that holds `instance`'s advisory lock (as a
    PostgreSQL restart or an operator's pg_terminate_backend would); how many sessions went."""
    with Database(url, name="killer", max_size=1) as db, db.connection() as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(l.pid) FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.classid = %s::oid AND l.objid = hashtext(%s)::oid",
            (0x74727563, instance)).fetchall()
    return len(rows)


def test_an_instance_lock_lost_refuses_claims_until_it_is_taken_again(pg_url) -> None:
    url = _migrated(pg_url)
    store, lock = open_postgresql(url, instance="tr-a")
    try:
        assert store.claim("d-held", "run", "tool")
        assert store.ping()
        assert _terminate_lock_backend(url, "tr-a") == 1
        # the lock went with its session: no claim is taken under a name this toolrunner may not hold
        with pytest.raises(StoreUnavailable, match="instance 'tr-a'") as refused:
            store.claim("d-lost", "run", "tool")
        assert refused.value.code == STORE_UNAVAILABLE
        assert store.get("d-lost") is None  # refused before anything was written
        # health takes it again (the database is back at once here): claims are served again
        _until(lambda: store.ping(), "the instance lock was never taken again")
        assert store.claim("d-again", "run", "tool")
        # the lock is really held again: a second toolrunner of the same name cannot start
        with pytest.raises(InstanceInUse):
            open_postgresql(url, instance="tr-a")
    finally:
        store.close()
        lock.release()


def test_a_lost_instance_name_taken_by_another_toolrunner_is_not_shared(pg_url) -> None:
    url = _migrated(pg_url)
    store, lock = open_postgresql(url, instance="tr-a")
    try:
        assert _terminate_lock_backend(url, "tr-a") == 1
        other, other_lock = open_postgresql(url, instance="tr-a")  # the name was free: another takes it
        try:
            # the first toolrunner cannot take its name back while the other holds it: it stays
            # unhealthy and refuses every claim, so two never run under one name
            for _ in range(3):
                assert not store.ping()
                with pytest.raises(StoreUnavailable, match="instance 'tr-a'"):
                    store.claim("d-first", "run", "tool")
            assert other.claim("d-other", "run", "tool")
        finally:
            other.close()
            other_lock.release()
        _until(lambda: store.ping(), "the name freed by the other was never taken back")
        assert store.claim("d-first", "run", "tool")
    finally:
        store.close()
        lock.release()
