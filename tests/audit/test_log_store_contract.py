"""The decision log's contract, on both backends: the SQLite file of one machine and the PostgreSQL
table a fleet shares (tests/pgserver.py, a real server). Whatever holds the log, the chain verifies,
a row changed behind the log's back is found, the filters pick the same records, and writers that
append at once leave one whole chain."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from checkpoint.audit import DecisionLog, DecisionReader
from checkpoint.audit.pg_log import PgDecisionLog
from checkpoint.audit.pg_reader import PgDecisionReader
from checkpoint.audit.pg_schema import SCHEMA, TABLE
from checkpoint.audit.port import DecisionLogReader, DecisionLogStore
from checkpoint.audit.verify import BROKEN_LINK, GAP, HASH_MISMATCH, TRUNCATED
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

from .conftest import make_record


@dataclass
class Backend:
    name: str
    tmp: Path
    url: str = ""

    def __post_init__(self) -> None:
        self._opened: list[Any] = []
        if self.name == "postgresql":
            with self.database() as db:
                migrate(db, SCHEMA)

    def database(self) -> Database:
        db = Database(parse_store_url(self.url, default_folder=self.tmp), name="test", max_size=4).open()
        self._opened.append(db)
        return db

    def writer(self) -> DecisionLogStore:
        """A new writer of the one log (another replica, or another worker on the same file)."""
        log: DecisionLogStore
        if self.name == "sqlite":
            log = DecisionLog(self.tmp / "decisions.db", shared=True)
        else:
            log = PgDecisionLog(self.database())
        self._opened.append(log)
        return log

    def reader(self) -> DecisionLogReader:
        if self.name == "sqlite":
            return DecisionReader(self.tmp / "decisions.db")
        return PgDecisionReader(self.database())

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> None:
        """Change the stored rows behind the log's back, as someone with access to the storage could."""
        if self.name == "sqlite":
            with sqlite3.connect(self.tmp / "decisions.db") as conn:
                conn.execute(sql.replace("%s", "?").replace(TABLE, "decisions"), params)
        else:
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(sql.encode(), params)

    def close(self) -> None:
        for thing in reversed(self._opened):
            thing.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    chosen = Backend(request.param, tmp_path, url)
    yield chosen
    chosen.close()


def _fill(log: DecisionLogStore, n: int, **overrides: Any) -> list[int]:
    return [log.append(make_record(**overrides)) for _ in range(n)]


def test_appended_records_come_back_in_seq_order_and_the_chain_verifies(backend):
    log = backend.writer()
    assert log.head()[0] == 0
    seqs = _fill(log, 7)
    assert seqs == list(range(1, 8))
    reader = backend.reader()
    records = list(reader.read())
    assert [r["seq"] for r in records] == seqs
    assert records[0]["arguments"]["note"] == "café" and records[0]["actor_chain"][0] == {"kind": "person", "id": "ann"}
    assert records[1]["prev_hash"] == records[0]["hash"]
    report = reader.verify()
    assert report.ok and report.checked == 7, report
    assert (report.head_seq, report.head_hash) == log.head() == reader.head()
    assert reader.verify(expect_head=log.head()).ok
    assert [r["seq"] for r in reader.tail(3)] == [5, 6, 7]
    assert [r["seq"] for r in reader.read(4, limit=2)] == [5, 6]


@pytest.mark.parametrize(("change", "reason", "at"), [
    (f"UPDATE {TABLE} SET reason = 'nothing to see' WHERE seq = 3", HASH_MISMATCH, 3),
    (f"UPDATE {TABLE} SET prev_hash = hash WHERE seq = 4", BROKEN_LINK, 4),
    (f"DELETE FROM {TABLE} WHERE seq = 2", GAP, 2),
])
def test_a_row_changed_behind_the_logs_back_is_found(backend, change, reason, at):
    log = backend.writer()
    _fill(log, 5)
    backend.execute(change)
    report = backend.reader().verify()
    assert not report.ok and (report.reason, report.broken_seq) == (reason, at), report


def test_records_deleted_from_the_end_are_found_against_a_head_kept_elsewhere(backend):
    log = backend.writer()
    _fill(log, 5)
    kept = log.head()
    backend.execute(f"DELETE FROM {TABLE} WHERE seq > 3")
    reader = backend.reader()
    assert reader.verify().ok  # a shorter chain is still whole: only the anchor tells
    report = reader.verify(expect_head=kept)
    assert not report.ok and report.reason == TRUNCATED, report


def test_filters_pick_the_same_records_on_either_backend(backend):
    log = backend.writer()
    log.append(make_record(run_id="r-a", root_run_id="r-a", verdict="ALLOW", time="2026-01-01T00:00:00.000000Z"))
    log.append(make_record(run_id="r-b", agent="billing", verdict="DENY", code="not_allowed", tenant="other",
                           time="2026-01-02T00:00:00.000000Z", reason="the needle is here"))
    log.append(make_record(run_id="r-c", root_run_id="r-a", verdict="ALLOW", action="plan", code="plan_refused",
                           arguments={"steps": [{"tool": "x", "code": "subject_off_limits"}]},
                           time="2026-01-03T00:00:00.000000Z", shadow_verdict="DENY", shadow_code="x"))
    log.append(make_record(run_id="r-d", root_run_id=None, verdict="HALT", accountable_person="bo",
                           time="2026-01-04T00:00:00.000000Z", approver="carol", trace_id="t-1"))
    reader = backend.reader()

    def seqs(**filters: Any) -> list[int]:
        return [r["seq"] for r in reader.read(**filters)]

    assert seqs(run_id="r-b") == [2]
    assert seqs(agent="support") == [1, 3, 4]
    assert seqs(verdict="ALLOW") == [1, 3]
    assert seqs(root_run_id="r-a") == [1, 3]
    assert seqs(root_run_id="r-d") == [4]  # a root that left root_run_id null is its own tree's root
    assert seqs(code="subject_off_limits") == [3]  # a plan is found by a refused step's code
    assert seqs(code="not_allowed") == [2]
    assert seqs(tenant="other") == [2]
    assert seqs(tenants=["acme"]) == [1, 3, 4] and seqs(tenants=[]) == []
    assert seqs(text="needle") == [2] and seqs(text="o-") == [1, 2, 4]
    assert seqs(person="bo") == [4] and seqs(approver="carol") == [4] and seqs(trace_id="t-1") == [4]
    assert seqs(shadow_flips=True) == [3]
    assert seqs(since="2026-01-02T00:00:00.000000Z", until="2026-01-04T00:00:00.000000Z") == [2, 3]
    assert seqs(action="plan", verdict="ALLOW") == [3]
    assert [r["seq"] for r in reader.tail(1, verdict="ALLOW")] == [3]
    with pytest.raises(TypeError, match="unknown filter"):
        list(reader.read(runid="r-a"))  # type: ignore[call-arg]


def test_writers_appending_at_once_leave_one_whole_chain(backend):
    writers = [backend.writer(), backend.writer()]
    taken: list[int] = []
    lock = threading.Lock()

    def append_many(log: DecisionLogStore, n: int) -> None:
        got = [log.append(make_record(run_id=f"run-{threading.get_ident()}")) for _ in range(n)]
        with lock:
            taken.extend(got)

    threads = [threading.Thread(target=append_many, args=(writers[i % 2], 25)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(1, 151))  # each record its own seq, none lost
    report = backend.reader().verify()
    assert report.ok and report.checked == 150, report


def test_a_follower_sees_what_another_writer_commits(backend):
    first, second = backend.writer(), backend.writer()
    _fill(first, 2)
    stop = threading.Event()
    seen: list[int] = []

    def follow() -> None:
        for record in first.follow(0, stop_event=stop, poll_interval=0.05, verdict="ALLOW"):
            seen.append(record["seq"])
            if len(seen) == 4:
                stop.set()

    follower = threading.Thread(target=follow)
    follower.start()
    second.append(make_record(verdict="DENY"))
    _fill(second, 2)
    follower.join(timeout=20)
    assert not follower.is_alive()
    assert seen == [1, 2, 4, 5]
