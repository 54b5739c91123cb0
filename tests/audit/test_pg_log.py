"""The decision log on a real PostgreSQL (tests/pgserver.py): what only that backend has: partitions
made as the chain grows, the database going away and coming back, a schema that is missing, and the
`warden audit` commands over `--store`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest

from checkpoint.audit.backends import open_log
from checkpoint.audit.errors import AuditUnavailable, InvalidAuditRecord
from checkpoint.audit.pg_log import PgDecisionLog
from checkpoint.audit.pg_schema import SCHEMA, TABLE
from tests.terminal import ctrl_c_as_at_a_terminal
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

from .conftest import make_record

REPO = Path(__file__).resolve().parents[2]


def _db(url: str, **kw) -> Database:
    return Database(parse_store_url(url, default_folder="/unused"), name="test", **kw).open()


@pytest.fixture
def migrated(pg_url: str) -> str:
    with _db(pg_url) as db:
        migrate(db, SCHEMA)
    return pg_url


def _warden(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})


def test_partitions_are_made_as_the_chain_grows_and_the_chain_runs_across_them(migrated):
    with _db(migrated) as db:
        log = PgDecisionLog(db, partition_seqs=5)
        try:
            for _ in range(12):
                log.append(make_record())
            assert log.verify().ok and log.head()[0] == 12
        finally:
            log.close()
    with psycopg.connect(migrated) as conn:
        parts = conn.execute("SELECT c.relname, count(*) OVER () FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                             "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = %s ORDER BY c.relname",
                             (TABLE,)).fetchall()
        assert [name for name, _ in parts] == [f"{TABLE}_p0", f"{TABLE}_p1", f"{TABLE}_p2"]
        assert conn.execute(f"SELECT count(*) FROM {TABLE}_p1").fetchone() == (5,)


def test_a_record_the_database_cannot_store_fails_alone(migrated):
    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            with pytest.raises(InvalidAuditRecord, match="not valid Unicode"):
                log.append(make_record(run_id="run\ud800"))  # a lone surrogate: no text can hold it
            assert log.writable
            assert log.append(make_record()) == 1
        finally:
            log.close()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the writer dies, as meant
def test_a_writer_that_fails_in_an_unforeseen_way_commits_nothing_it_answers_for(migrated):
    """Not a database error (a bug, memory): the records waiting on that batch are refused, never
    handed a seq as if committed (a caller would answer ALLOW on a record that is not there)."""
    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            assert log.append(make_record()) == 1

            def broken(conn, batch):
                raise RuntimeError("a bug in the chaining")

            log.chain_rows = broken  # type: ignore[method-assign]
            with pytest.raises(AuditUnavailable, match="writer failed: RuntimeError"):
                log.append(make_record())
            with pytest.raises(AuditUnavailable):  # the writer is gone: later records refused too
                log.append(make_record())
        finally:
            log.close()
    with psycopg.connect(migrated) as conn:
        assert conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone() == (1,)


def test_a_store_without_the_schema_stops_the_log_at_start_saying_what_to_run(pg_url, tmp_path):
    with pytest.raises(AuditUnavailable, match="warden store migrate") as caught:
        open_log(parse_store_url(pg_url, default_folder=tmp_path), tmp_path)
    assert "store_schema_mismatch" in str(caught.value)


def test_the_database_gone_refuses_every_record_and_the_log_comes_back_by_itself(pg_server, migrated):
    changes: list[bool] = []
    with _db(migrated, pool_timeout=1.0, connect_timeout=2) as db:
        log = PgDecisionLog(db, probe_interval=0.2)
        log.on_writable(changes.append)
        try:
            assert log.append(make_record()) == 1
            pg_server.stop()
            try:
                started = time.monotonic()
                with pytest.raises(AuditUnavailable, match="cannot commit"):
                    log.append(make_record())
                assert time.monotonic() - started < 8  # refused, not hung
                assert not log.writable and changes == [True, False]
                with pytest.raises(AuditUnavailable):
                    log.append(make_record())
            finally:
                pg_server.start()
            # no record is sent: the probe finds the database again
            deadline = time.monotonic() + 20
            # the probe sets the flag, then tells the listener: wait for both
            while (not log.writable or len(changes) < 3) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert log.writable and changes == [True, False, True]
            assert log.append(make_record()) == 2  # the refused records were never committed
            assert log.verify().ok
        finally:
            log.close()


def test_audit_commands_read_verify_and_find_tampering_in_the_postgresql_log(migrated, tmp_path):
    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            for n in range(4):
                log.append(make_record(run_id=f"run-{n % 2}"))
            head = log.head()
        finally:
            log.close()
    data = ["--data", str(tmp_path / "no-such-folder")]
    verified = _warden("audit", "verify", "--store", migrated, *data, "--expect-head", f"{head[0]}:{head[1]}")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("ok: 4 records")
    query = _warden("audit", "query", "--store", migrated, *data, "--run", "run-1", "--format", "jsonl")
    assert query.returncode == 0, query.stderr
    assert [json.loads(line)["seq"] for line in query.stdout.splitlines()] == [2, 4]
    tail = _warden("audit", "tail", "--store", migrated, *data, "-n", "1", "--format", "jsonl")
    assert [json.loads(line)["seq"] for line in tail.stdout.splitlines()] == [4]
    exported = _warden("audit", "export", "--store", migrated, *data, "--after", "1", "--run", "run-0")
    assert exported.returncode == 0, exported.stderr
    assert [json.loads(line)["seq"] for line in exported.stdout.splitlines()] == [3]
    shown = _warden("audit", "head", "--store", migrated, *data)
    assert shown.stdout.strip() == f"{head[0]}:{head[1]}"
    with psycopg.connect(migrated, autocommit=True) as conn:
        conn.execute(f"UPDATE {TABLE} SET reason = 'nothing happened' WHERE seq = 3")
    broken = _warden("audit", "verify", "--store", migrated, *data)
    assert broken.returncode == 1 and "BROKEN at seq 3: hash_mismatch" in broken.stderr


def test_audit_commands_say_in_one_line_when_the_store_cannot_be_read(pg_url, tmp_path):
    missing = _warden("audit", "verify", "--store", pg_url, "--data", str(tmp_path))
    assert missing.returncode == 2
    assert "warden store migrate" in missing.stderr and "Traceback" not in missing.stderr


def test_a_writer_that_stalls_holding_the_chains_lock_holds_the_others_back_for_seconds_only(migrated):
    stalled = threading.Event()

    class Stalling(PgDecisionLog):
        def _ensure_partitions(self, conn, first, last):  # called holding the lock, the head read
            stalled.set()
            time.sleep(6)  # as a replica stopped (SIGSTOP) or cut off inside its transaction would
            super()._ensure_partitions(conn, first, last)

    with _db(migrated) as stuck_db, _db(migrated) as db:
        stuck, other = Stalling(stuck_db), PgDecisionLog(db)
        try:
            failed: list[BaseException] = []

            def append_stuck() -> None:
                try:
                    stuck.append(make_record())
                except AuditUnavailable as exc:
                    failed.append(exc)

            worker = threading.Thread(target=append_stuck)
            worker.start()
            assert stalled.wait(10)
            started = time.monotonic()
            assert other.append(make_record()) == 1  # the stalled one's record never committed
            assert time.monotonic() - started < 4.5  # its session ended after 2 s, and its lock with it
            worker.join()
            assert failed, "the stalled writer's record must not count as committed"
            assert other.verify().ok
        finally:
            stuck.close()
            other.close()


def test_a_partition_made_by_a_transaction_that_failed_is_made_again(migrated):
    failures = [1]

    class FailingOnce(PgDecisionLog):
        def _ensure_partitions(self, conn, first, last):
            super()._ensure_partitions(conn, first, last)
            if failures:  # the database goes away after the partition was made, before the COMMIT
                failures.pop()
                raise psycopg.OperationalError("server closed the connection unexpectedly")

    with _db(migrated) as db:
        log = FailingOnce(db, partition_seqs=5, probe_interval=0.1)
        try:
            with pytest.raises(AuditUnavailable):
                log.append(make_record())
            assert log.append(make_record()) == 1  # not "no partition of relation found for row"
            assert log.verify().ok
        finally:
            log.close()


def test_the_table_has_the_columns_of_the_record_in_their_order(migrated):
    from checkpoint.audit.record import COLUMNS

    with psycopg.connect(migrated) as conn:
        found = conn.execute("SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                             "ORDER BY ordinal_position", (TABLE,)).fetchall()
    assert tuple(name for (name,) in found) == COLUMNS


def test_readers_holding_every_read_connection_never_keep_a_record_waiting(migrated):
    with _db(migrated, max_size=1) as writer, _db(migrated, max_size=1, pool_timeout=0.5) as readers:
        log = PgDecisionLog(writer, read_db=readers)
        try:
            with readers.connection():  # every read connection busy (a crowd of WatchDecisions streams)
                assert log.append(make_record()) == 1
                with pytest.raises(AuditUnavailable, match="no free connection"):
                    log.tail(1)  # a read waits its turn, and is refused after the pool's timeout
            assert [r["seq"] for r in log.tail(1)] == [1]
        finally:
            log.close()


def test_the_first_read_after_the_database_restarted_is_answered(pg_server, migrated):
    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            log.append(make_record())
            assert log.head()[0] == 1  # the pool now holds a connection the restart will drop
            pg_server.stop()
            pg_server.start()
            assert log.head()[0] == 1 and [r["seq"] for r in log.read()] == [1]
        finally:
            log.close()


def test_audit_ship_sends_the_postgresql_log_once_from_its_cursor(migrated, tmp_path):
    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            for _ in range(3):
                log.append(make_record())
            out, cursor = tmp_path / "siem.jsonl", tmp_path / "cursor.json"
            args = ("audit", "ship", "--store", migrated, "--to", str(out), "--cursor", str(cursor), "-q")
            first = _warden(*args)
            assert first.returncode == 0, first.stderr
            log.append(make_record())
            second = _warden(*args)  # only what came after the cursor
            assert second.returncode == 0, second.stderr
        finally:
            log.close()
    shipped = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["seq"] for r in shipped] == [1, 2, 3, 4] and shipped[1]["prev_hash"] == shipped[0]["hash"]


def test_the_auditors_web_view_serves_the_postgresql_log(migrated, tmp_path):
    import urllib.request

    from tests.audit_web.world import TOKENS, policy_copy, write_tokens

    with _db(migrated) as db:
        log = PgDecisionLog(db)
        try:
            log.append(make_record(run_id="run-a", tenant="acme"))
            log.append(make_record(run_id="run-b", tenant="globex"))
            log.append(make_record(run_id="run-c", tenant="acme", action="start_run"))
            log.append(make_record(run_id="run-c", tenant="acme", verdict="DENY"))
        finally:
            log.close()
    policies, tokens = policy_copy(tmp_path / "policies"), write_tokens(tmp_path / "audit.tokens")
    proc = subprocess.Popen(
        [sys.executable, "-m", "warden.cli", "audit", "serve", "--store", migrated, "--data", str(tmp_path / "data"),
         "--policies", str(policies), "--tokens", str(tokens), "--address", "127.0.0.1:0"],
        cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=ctrl_c_as_at_a_terminal)
    try:
        line = proc.stderr.readline()
        assert "http://127.0.0.1:" in line, line + proc.stderr.read()
        url = line.split()[3]

        def get(path: str) -> dict:
            request = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {TOKENS['carol']}"})
            with urllib.request.urlopen(request, timeout=10) as answer:
                return json.loads(answer.read())

        decisions = get("api/decisions")
        assert [r["run_id"] for r in decisions["records"]] == ["run-a", "run-c", "run-c"]  # acme's only: carol's
        assert get("api/decisions?after=1")["records"][0]["seq"] == 3
        assert get("api/verify")["ok"] is True and get("api/verify")["checked"] == 4
        [run] = get("api/runs")["runs"]  # the runs started, from their start_run
        assert (run["run_id"], run["status"], run["decisions"], run["denied"]) == ("run-c", "open", 2, 1)
        assert [r["run_id"] for r in get("api/runs?refused=1")["runs"]] == ["run-c"]
        assert get("api/runs?status=succeeded")["runs"] == []
        assert [r["verdict"] for r in get("api/runs/run-c")["refusals"]] == ["DENY"]
    finally:
        proc.send_signal(2)
        assert proc.wait(timeout=20) == 0
