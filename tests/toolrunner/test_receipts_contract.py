"""The receipts contract on both backends: a SQLite file and a real PostgreSQL (tests/pgserver.py).

Two stores opened on the same file or database stand for two toolrunner instances sharing it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from toolrunner.receipts.postgresql import SCHEMA, PostgresReceipts
from toolrunner.receipts.sqlite import SqliteReceipts
from toolrunner.receipts.store import Receipts
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url
from warden.toolrunner.v1 import toolrunner_pb2 as pb

Opener = Callable[[str], Receipts]


@pytest.fixture(params=["sqlite", "postgresql"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """`open_store(instance)`: the receipts of that instance, on the one store this test shares."""
    opened: list[Receipts] = []
    if request.param == "sqlite":
        def opener(instance: str) -> Receipts:
            opened.append(SqliteReceipts(tmp_path / "toolrunner.db", instance=instance))
            return opened[-1]
    else:
        url = parse_store_url(request.getfixturevalue("pg_url"), default_folder="/unused")
        with Database(url, name="migrate", max_size=1) as db:
            migrate(db, SCHEMA)

        def opener(instance: str) -> Receipts:
            opened.append(PostgresReceipts(Database(url, name=f"test-{instance}").open(), instance=instance))
            return opened[-1]
    yield opener
    for store in opened:
        store.close()


def test_a_decision_is_claimed_once_and_its_receipt_survives_a_restart(open_store: Opener) -> None:
    store = open_store("tr-a")
    assert store.get("d1") is None
    assert store.claim("d1", "run", "tool")
    assert not store.claim("d1", "run", "tool")
    assert store.get("d1") == ("running", None)
    store.finish(pb.Receipt(decision_id="d1", run_id="run", tool="tool", output="hi"))
    store.close()
    again = open_store("tr-a")
    state, receipt = again.get("d1")  # type: ignore[misc]
    assert state == "done" and receipt is not None and receipt.output == "hi"


def test_a_claim_left_running_by_a_crash_becomes_interrupted(open_store: Opener) -> None:
    store = open_store("tr-a")
    store.claim("d2", "run", "tool")
    assert store.mark_interrupted() == 1
    state, receipt = store.get("d2")  # type: ignore[misc]
    assert state == "done" and receipt is not None and receipt.code == "interrupted"
    assert (receipt.decision_id, receipt.run_id, receipt.tool, receipt.exit_code) == ("d2", "run", "tool", -1)
    assert not store.claim("d2", "run", "tool")  # and it never runs again
    assert store.mark_interrupted() == 0


def test_a_grant_claimed_by_one_instance_is_refused_to_another(open_store: Opener) -> None:
    first, second = open_store("tr-a"), open_store("tr-b")
    assert first.claim("d3", "run", "tool")
    assert not second.claim("d3", "run", "tool")
    assert second.get("d3") == ("running", None)
    first.finish(pb.Receipt(decision_id="d3", run_id="run", tool="tool", exit_code=0, output="once"))
    assert not second.claim("d3", "run", "tool")
    state, receipt = second.get("d3")  # type: ignore[misc]
    assert state == "done" and receipt is not None and receipt.output == "once"


def test_a_starting_instance_interrupts_only_the_claims_it_left_running(open_store: Opener) -> None:
    live, restarted = open_store("tr-live"), open_store("tr-restarted")
    assert live.claim("d-live", "run", "tool")
    assert restarted.claim("d-own", "run", "tool")
    assert restarted.interrupt_cut_off() == ["d-own"]
    assert live.get("d-live") == ("running", None)  # another toolrunner's call, still running
    live.finish(pb.Receipt(decision_id="d-live", run_id="run", tool="tool", output="finished"))
    state, receipt = restarted.get("d-live")  # type: ignore[misc]
    assert state == "done" and receipt is not None and receipt.output == "finished"


def _race(stores: list[Receipts], decision_id: str, n: int = 8) -> list[bool]:
    """`n` claims of one decision id at once, spread over `stores`; what each got."""
    start = threading.Barrier(n)
    won: list[bool] = []
    lock = threading.Lock()

    def claim(store: Receipts) -> None:
        start.wait()
        result = store.claim(decision_id, "run", "tool")
        with lock:
            won.append(result)

    threads = [threading.Thread(target=claim, args=(stores[i % len(stores)],)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return won


def test_concurrent_claims_of_one_grant_let_exactly_one_through(open_store: Opener) -> None:
    stores = [open_store("tr-a"), open_store("tr-b")]
    for round_ in range(5):
        assert sorted(_race(stores, f"d-race-{round_}")) == [False] * 7 + [True]


def test_a_receipts_file_from_before_instances_counts_its_open_claims_as_any_instances(tmp_path: Path) -> None:
    # the table as releases before instance names wrote it: a claim left running there was made by
    # whichever runner used this data folder, so the next one to start marks it
    path = tmp_path / "toolrunner.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE receipts (decision_id TEXT PRIMARY KEY NOT NULL, run_id TEXT, tool TEXT, "
                     "state TEXT NOT NULL, code TEXT, claimed_at FLOAT, finished_at FLOAT, receipt BLOB)")
        conn.execute("INSERT INTO receipts (decision_id, run_id, tool, state, code) VALUES ('d-old', 'run', 'tool', "
                     "'running', '')")
    store = SqliteReceipts(path, instance="tr-new")
    try:
        assert store.interrupt_cut_off() == ["d-old"]
        state, receipt = store.get("d-old")  # type: ignore[misc]
        assert state == "done" and receipt is not None and receipt.code == "interrupted"
        assert store.claim("d-new", "run", "tool") and store.interrupt_cut_off() == ["d-new"]
    finally:
        store.close()
