"""A write that fails: every waiter gets AuditUnavailable, nothing partial is kept, the chain goes on."""

from __future__ import annotations

import sqlite3
import threading
import time

import pytest

from checkpoint.audit import AuditUnavailable, DecisionLog

BOUND = 20.0  # seconds to wait for a state change, generous on a loaded machine


def _until(condition, what: str) -> None:
    deadline = time.monotonic() + BOUND
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.005)


@pytest.mark.timeout(90)
def test_failed_batch_fails_every_waiter_and_leaves_nothing_partial(log_path, make_record):
    with DecisionLog(log_path, busy_timeout_ms=60_000) as log:
        for _ in range(3):
            log.append(make_record())
        committed_head = log.head()
        side = sqlite3.connect(log_path, isolation_level=None)
        # A real SQLite failure mid-batch: this record aborts the INSERT statement.
        side.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON decisions WHEN NEW.tenant = 'boom' "
            "BEGIN SELECT RAISE(ABORT, 'injected write failure'); END"
        )
        # Hold the write lock so the writer stalls on one batch while the next one fills up:
        # the good records and the poisoned one are then certain to share a transaction.
        side.execute("BEGIN IMMEDIATE")
        outcomes: dict[str, object] = {}

        def append(record):
            try:
                outcomes[record["decision_id"]] = log.append(record)
            except AuditUnavailable as exc:
                outcomes[record["decision_id"]] = exc

        first = threading.Thread(target=append, args=(make_record(decision_id="stalled"),))
        first.start()
        _until(lambda: log.stats()["writing"] == 1, "the writer to take the first batch")
        batch = [make_record(decision_id=f"good-{i}") for i in range(8)]
        batch.insert(4, make_record(decision_id="poison", tenant="boom"))
        threads = [threading.Thread(target=append, args=(r,)) for r in batch]
        for t in threads:
            t.start()
        _until(lambda: log.stats()["queued"] == len(batch), "the second batch to fill")
        side.execute("ROLLBACK")
        for t in [first, *threads]:
            t.join()

        assert outcomes["stalled"] == 4
        for record in batch:
            outcome = outcomes[record["decision_id"]]
            assert isinstance(outcome, AuditUnavailable), record["decision_id"]
            assert outcome.code == "audit_unavailable"
            assert "injected write failure" in str(outcome)
        stored = list(log.read())
        assert [r["decision_id"] for r in stored][-1] == "stalled"
        assert len(stored) == 4
        assert log.stats()["failures"] == 1
        assert log.verify().ok

        side.execute("DROP TRIGGER boom")
        side.close()
        seq = log.append(make_record(decision_id="after"))
        assert seq == 5
        after = list(log.read(after_seq=4))
        assert after[0]["prev_hash"] == stored[-1]["hash"] != committed_head[1]
        assert log.verify().ok


def test_connection_closed_underneath_fails_closed_then_recovers(log_path, make_record):
    with DecisionLog(log_path) as log:
        assert log.append(make_record()) == 1
        assert log._conn is not None
        log._conn.close()
        with pytest.raises(AuditUnavailable) as caught:
            log.append(make_record(decision_id="lost"))
        assert caught.value.code == "audit_unavailable"
        assert [r["decision_id"] for r in log.read()] != ["lost"]
        assert log.append(make_record()) == 2  # the writer reopened the file
        assert log.verify().ok and log.verify().checked == 2


def test_append_after_close_is_refused(log_path, make_record):
    log = DecisionLog(log_path)
    log.append(make_record())
    log.close()
    log.close()  # idempotent
    with pytest.raises(AuditUnavailable, match="closed"):
        log.append(make_record())


@pytest.mark.timeout(60)
def test_append_times_out_when_the_file_stays_locked(log_path, make_record):
    with DecisionLog(log_path, busy_timeout_ms=60_000) as log:
        side = sqlite3.connect(log_path, isolation_level=None)
        side.execute("BEGIN IMMEDIATE")
        with pytest.raises(AuditUnavailable, match="timed out"):
            log.append(make_record(), timeout=0.2)
        side.execute("ROLLBACK")
        side.close()
        # Committed once the lock is gone: recorded but not acted on is the safe direction.
        _until(lambda: log.stats()["committed_seq"] == 1, "the late commit")
        assert log.verify().ok


def test_unopenable_path_is_audit_unavailable(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(AuditUnavailable):
        DecisionLog(blocker / "decisions.db")


def test_not_a_database_is_audit_unavailable(tmp_path):
    bogus = tmp_path / "decisions.db"
    bogus.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(AuditUnavailable):
        DecisionLog(bogus)


def test_foreign_schema_is_refused(tmp_path):
    path = tmp_path / "decisions.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE decisions (seq INTEGER PRIMARY KEY, something TEXT)")
    conn.close()
    with pytest.raises(AuditUnavailable, match="schema"):
        DecisionLog(path)
