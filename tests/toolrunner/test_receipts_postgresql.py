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
