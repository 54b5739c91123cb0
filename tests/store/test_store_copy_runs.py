"""`warden store copy` of a driver's `driver.db` and a checkpoint's `limits.db` on a real PostgreSQL
(tests/pgserver.py): files made by the real SQLite stores, read back after the copy through the
PostgreSQL stores' own API, and every case the copy must refuse refused with nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from checkpoint.server.limit_store import Bucket, Increment, SqliteLimits
from checkpoint.server.limit_store_pg import PgLimits
from driver.runs.copy import TABLES
from driver.runs.model import PERSON_PAUSED, EventKind, RunStatus
from driver.runs.postgresql import open_postgresql
from driver.runs.sqlite import SqliteRunStore
from warden.store.url import parse_store_url

RUNS = 5
EVENTS_PER_RUN = 7
LIMIT_TABLE = "checkpoint_limit_counts"


def _warden(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", *argv], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


@pytest.fixture
def migrated(pg_url: str) -> str:
    done = _warden("store", "migrate", "--store", pg_url)
    assert done.returncode == 0, done.stdout + done.stderr
    return pg_url


def _make_runs(path: Path) -> None:
    """A stopped driver's file: runs in several states, a child run, events, a transcript, calls, an
    approval decided and one waiting, a receipt, spend, a pause."""
    store = SqliteRunStore(path)
    try:
        for n in range(RUNS):
            store.create_run(run_id=f"run-{n}", agent="recon", agent_version="v1", tenant="acme", owner="alice",
                             budget={"turns": 5 + n}, delegates=["triage"], note="café")
            store.add_goal(f"run-{n}", {"text": f"goal {n}"}, "alice")
            for k in range(EVENTS_PER_RUN):
                store.append_event(f"run-{n}", EventKind.NUDGED, step=k, note="ünïcode")
            store.add_transcript(f"run-{n}", {"role": "user", "text": f"go {n}"})
        store.create_run(run_id="child", agent="triage", agent_version="v2", tenant="acme", owner="alice",
                         parent_run_id="run-0", root_run_id="run-0", depth=1)
        store.add_goal("child", {"text": "triage"}, "run-0")
        pk = store.add_call("run-1", 1, 0, call_id="t1", tool="refund", arguments={"order": "o-1"}, args_sha="s",
                            plan_step="p1")
        store.update_call(pk, status="done", result={"is_error": False, "content": "ok"}, grant=b"\x00grant\xff")
        waiting = store.add_call("run-2", 1, 0, call_id="t2", tool="refund", arguments={"order": "o-2"},
                                 args_sha="s2", plan_step="")
        decided = store.add_approval(run_id="run-1", call=pk, decision_id="d1", tool="refund",
                                     arguments={"order": "o-1"}, code="approval_required", rule="r", reason="why")
        store.decide_approval(decided, "approved", "bob", "fine", token="tok")
        store.add_approval(run_id="run-2", call=waiting, decision_id="d2", tool="refund",
                           arguments={"order": "o-2"}, code="approval_required", rule="r", reason="why")
        assert store.set_status("run-2", RunStatus.AWAITING_APPROVAL, "approval_required", "waits for bob")
        assert store.set_status("run-3", RunStatus.SUCCEEDED, "done", "finished")
        store.add_receipt("run-1", "d1", "refund", 0, "ok", "refunded", {"decision_id": "d1"})
        store.add_spend("run-1", "alice", "acme", 0.25)
        store.add_pause("run-4", PERSON_PAUSED, "bob", "paused by bob", "look")
    finally:
        store.close()


def _make_limits(path: Path) -> None:
    limits = SqliteLimits(path)
    try:
        counted = limits.count([Increment(Bucket("calls", "principal:ops", 1000), 3, 10, 1060),
                                Increment(Bucket("spend", "tenant:acme\x00x", 1000), 7, 7, 1060)], now=1000)
        assert counted.missed is None
    finally:
        limits.close()


def _unset(value):
    # a column the SQLite store never wrote reads NULL there and its default on PostgreSQL (the copy
    # writes the default, as PostgreSQL's own store would)
    return "" if value is None or value == b"" else value


def _snapshot(store) -> dict:
    """What a driver reads of its runs, through the store's API."""
    runs = store.runs(limit=1000)
    return {
        "runs": sorted((r.run_id, r.status, r.budget, r.delegates, r.note, r.parent_run_id, r.depth, r.created_at)
                       for r in runs),
        "events": [(e.seq, e.run_id, e.kind, e.data, e.time) for e in store.events(limit=10_000)],
        "goals": {r.run_id: store.goal(r.run_id) for r in runs},
        "transcript": {r.run_id: store.transcript(r.run_id) for r in runs},
        "calls": {r.run_id: [{k: _unset(v) for k, v in c.items()} for c in store.calls(r.run_id)] for r in runs},
        "approvals": sorted(tuple(map(_unset, (a.approval_id, a.run_id, a.call, a.status, a.decided_by, a.token,
                                               a.deadline))) + (a.arguments,) for a in store.approvals()),
        "receipts": store.receipts("run-1"),
        "spend": store.spend_today("alice", "acme"),
        "pauses": [(p.pause_id, p.run_id, p.state, p.person) for p in store.open_pauses()],
    }


def _counts(pg_url: str) -> dict[str, int]:
    with psycopg.connect(pg_url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in (*(table.target for table in TABLES), LIMIT_TABLE)}


def test_a_drivers_runs_and_the_limit_counts_move_whole_and_read_back_the_same(migrated, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _make_runs(folder / "driver.db")
    _make_limits(folder / "limits.db")
    source = SqliteRunStore(folder / "driver.db")
    before = _snapshot(source)
    source.close()

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"runs: driver_events: {RUNS * EVENTS_PER_RUN}/{RUNS * EVENTS_PER_RUN} copied" in done.stdout
    assert f"limits: {LIMIT_TABLE}: 2/2 copied" in done.stdout
    assert "not copied" not in done.stdout

    url = parse_store_url(migrated, default_folder=".")
    store = open_postgresql(url)
    try:
        after = _snapshot(store)
        assert after == before
        assert len(after["runs"]) == RUNS + 1 and after["approvals"][0][3] in ("approved", "pending")
        assert store.calls("run-1")[0]["grant"] == b"\x00grant\xff"
        assert store.run("run-2").status is RunStatus.AWAITING_APPROVAL and store.children("run-0")[0].run_id == "child"
        # the first rows written after the move are numbered after the last ones copied
        last = after["events"][-1][0]
        assert store.append_event("run-0", EventKind.NUDGED) == last + 1
        newest = store.add_call("run-0", 9, 0, call_id="t9", tool="scan", arguments={}, args_sha="", plan_step="")
        assert newest > max(c["id"] for calls in after["calls"].values() for c in calls)
        store.add_transcript("run-0", {"role": "user", "text": "again"})
        store.add_spend("run-0", "alice", "acme", 1.0)
        assert store.transcript("run-0")[-1] == {"role": "user", "text": "again"}
    finally:
        store.close()

    from warden.store.pg import Database
    with Database(url, name="test-limits", max_size=1) as db:
        limits = PgLimits(db)
        # the NUL in a key is escaped as PgLimits escapes it: the same call finds the copied count
        assert limits.used([Bucket("calls", "principal:ops", 1000), Bucket("spend", "tenant:acme\x00x", 1000)]) == {
            Bucket("calls", "principal:ops", 1000): 3, Bucket("spend", "tenant:acme\x00x", 1000): 7}
        full = limits.count([Increment(Bucket("spend", "tenant:acme\x00x", 1000), 1, 7, 1060)], now=1001)
        assert full.missed == Bucket("spend", "tenant:acme\x00x", 1000)  # the window stays spent after the move

    counts = _counts(migrated)
    again = _warden("store", "copy", str(folder), migrated)
    assert again.returncode == 1 and "already holds" in again.stderr, again.stdout + again.stderr
    assert _counts(migrated) == counts


def test_a_driver_db_cut_short_is_refused_with_nothing_written(migrated, tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    _make_runs(whole / "driver.db")
    _make_limits(whole / "limits.db")
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "limits.db").write_bytes((whole / "limits.db").read_bytes())  # whole: would copy on its own
    data = (whole / "driver.db").read_bytes()
    (cut / "driver.db").write_bytes(data[: len(data) // 2])  # a file copied while it was being written

    done = _warden("store", "copy", str(cut), migrated)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "refused, nothing written" in done.stderr and "driver.db" in done.stderr
    assert set(_counts(migrated).values()) == {0}


def test_a_limits_db_cut_short_is_refused_with_nothing_written(migrated, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _make_runs(folder / "driver.db")
    _make_limits(folder / "limits.db")
    data = (folder / "limits.db").read_bytes()
    # a little more than its first page: the header says more pages than the file holds
    (folder / "limits.db").write_bytes(data[: 4096 + 100])

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "refused, nothing written" in done.stderr and "limits.db" in done.stderr
    assert set(_counts(migrated).values()) == {0}


@pytest.mark.parametrize(("column", "value", "said"), [
    ("status", "exploded", "run 'run-0' cannot be read"),  # a status no driver writes
    ("budget", "{not json", "run 'run-0' cannot be read"),
])
def test_a_run_that_does_not_read_back_is_refused_with_nothing_written(migrated, tmp_path, column, value, said):
    import sqlite3

    folder = tmp_path / "data"
    folder.mkdir()
    _make_runs(folder / "driver.db")
    with sqlite3.connect(folder / "driver.db") as conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE run_id = 'run-0'", (value,))
    conn.close()

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and said in done.stderr, done.stdout + done.stderr
    assert set(_counts(migrated).values()) == {0}


def test_an_event_whose_data_is_no_json_or_a_count_below_zero_is_refused(migrated, tmp_path):
    import sqlite3

    folder = tmp_path / "data"
    folder.mkdir()
    _make_runs(folder / "driver.db")
    with sqlite3.connect(folder / "driver.db") as conn:
        conn.execute("UPDATE events SET data = '{\"step\": 1' WHERE seq = 3")
    conn.close()
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "events whose data is not JSON" in done.stderr, done.stdout + done.stderr

    other = tmp_path / "other"
    other.mkdir()
    _make_limits(other / "limits.db")
    with sqlite3.connect(other / "limits.db") as conn:
        conn.execute("UPDATE counts SET used = -1 WHERE key = 'principal:ops'")
    conn.close()
    done = _warden("store", "copy", str(other), migrated)
    assert done.returncode == 1 and "is no count" in done.stderr, done.stdout + done.stderr
    assert set(_counts(migrated).values()) == {0}


def test_a_driver_started_on_the_store_before_the_copy_is_never_merged_into(migrated, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    _make_runs(folder / "driver.db")
    store = open_postgresql(parse_store_url(migrated, default_folder="."))
    try:
        store.create_run(run_id="fleet-1", agent="recon", agent_version="v1", tenant="acme", owner="alice")
    finally:
        store.close()

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "driver_runs" in done.stderr and "already holds" in done.stderr, done.stderr
    counts = _counts(migrated)
    assert counts["driver_runs"] == 1 and counts["driver_events"] == 0


def test_the_folder_warden_up_made_moves_the_runs_from_its_driver_folder(migrated, tmp_path):
    folder = tmp_path / "data"
    (folder / "driver").mkdir(parents=True)
    (folder / "checkpoint").mkdir()
    _make_runs(folder / "driver" / "driver.db")
    _make_limits(folder / "checkpoint" / "limits.db")

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = _counts(migrated)
    assert counts["driver_runs"] == RUNS + 1 and counts["driver_events"] == RUNS * EVENTS_PER_RUN
    assert counts[LIMIT_TABLE] == 2
