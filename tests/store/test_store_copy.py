"""`warden store copy SRC DST` on a real PostgreSQL (tests/pgserver.py): a SQLite data folder (a
decision log with a sealed segment and signed heads, spent approvals, ended runs, receipts) moved
whole, its chain verifying after with the same seqs and hashes, and every case it must refuse
refused before anything is written."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psycopg
import pytest

from checkpoint.audit import heads, pg_copy
from checkpoint.audit.log import DecisionLog
from checkpoint.audit.pg_schema import TABLE as DECISIONS
from checkpoint.audit.reader import DecisionReader
from checkpoint.audit.record import SCHEMA_COLUMNS, record_hash
from checkpoint.audit.rotate import prune, rotate
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.learnings import LearningStore
from checkpoint.server.single_use import SingleUse
from toolrunner.receipts.sqlite import SqliteReceipts
from warden import store_cli
from warden.store import copy as store_copy
from warden.store.copy import CopyRefused, copy_folder
from warden.store.pg import Database
from warden.store.url import parse_store_url
from warden.toolrunner.v1 import toolrunner_pb2 as pb

RECORDS = 300
TABLES = (DECISIONS, "checkpoint_single_use", "checkpoint_ended_runs", "toolrunner_receipts")


def _warden(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", *argv], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


def _record(n: int) -> dict:
    return {"tenant": "acme", "run_id": f"run-{n % 7}", "agent": "support", "action": "tool_call", "tool": "refund",
            "arguments": {"order": f"o-{n}", "note": "café"}, "verdict": "ALLOW" if n % 3 else "DENY",
            "code": "allowed", "rule": "allowlist", "reason": f"record {n}", "latency_us": n}


def _make_folder(folder: Path, *, seal_at: int | None = 120) -> Path:
    """A stopped checkpoint's and toolrunner's data folder, as they leave it."""
    log_path = folder / "decisions.db"
    with DecisionLog(log_path) as log:
        signer = heads.HeadSigner(log.head, log_path, interval=None)
        for n in range(1, RECORDS + 1):
            log.append(_record(n))
            if n in (100, 250):
                signer.sign_now()
        signer.sign_now()
    if seal_at:
        rotate(log_path, upto=seal_at, key=heads.load_or_create_key(heads.key_path(log_path)))
    used = SingleUse(folder / "approvals-used.db")
    used.claim("approval-1", "decision-9")
    used.claim("act\x00with-nul", "decision-10")
    used.end_run("run-3", "cancelled")
    used.close()
    receipts = SqliteReceipts(folder / "toolrunner.db", instance="tr-1")
    receipts.claim("d-1", "run-1", "refund")
    receipts.finish(pb.Receipt(decision_id="d-1", run_id="run-1", tool="refund", exit_code=0, code="ok"))
    receipts.close()
    return log_path


def _chain(rows) -> list[tuple[int, str, str]]:
    return [(row[0], row[1], row[2]) for row in rows]


def _counts(pg_url: str) -> dict[str, int]:
    with psycopg.connect(pg_url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.fixture
def migrated(pg_url: str) -> str:
    done = _warden("store", "migrate", "--store", pg_url)
    assert done.returncode == 0, done.stdout + done.stderr
    return pg_url


def test_a_data_folder_moves_whole_and_its_chain_verifies_with_the_signed_heads(migrated, tmp_path):
    folder = tmp_path / "data"
    log_path = _make_folder(folder)
    assert (folder / "decisions.d").is_dir()  # the first 120 records are read from a sealed segment
    sqlite3.connect(folder / "driver.db").close()  # a driver's file whose tables were never made

    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"decisions: {DECISIONS}: {RECORDS}/{RECORDS} copied" in done.stdout
    assert "receipts: toolrunner_receipts: 1/1 copied" in done.stdout
    assert f"runs: driver.db in {folder} is empty: nothing to copy" in done.stdout

    source = sqlite3.connect(log_path)
    live = _chain(source.execute("SELECT seq, prev_hash, hash FROM decisions ORDER BY seq"))
    segment = sqlite3.connect(next((folder / "decisions.d").glob("segment-*.db")))
    sealed = _chain(segment.execute("SELECT seq, prev_hash, hash FROM decisions ORDER BY seq"))
    with psycopg.connect(migrated) as conn:
        copied = _chain(conn.execute(f"SELECT seq, prev_hash, hash FROM {DECISIONS} ORDER BY seq"))
        assert conn.execute(f"SELECT reason, arguments FROM {DECISIONS} WHERE seq = 7").fetchone() == (
            "record 7", '{"note":"café","order":"o-7"}')
        used = dict(conn.execute("SELECT key, used_by FROM checkpoint_single_use").fetchall())
        ended = conn.execute("SELECT run_id, how FROM checkpoint_ended_runs").fetchall()
        receipt = conn.execute("SELECT state, instance, receipt FROM toolrunner_receipts").fetchone()
    assert copied == sealed + live and len(copied) == RECORDS
    assert used == {"approval-1": "decision-9", "act\\0with-nul": "decision-10"}  # escaped as single_use_pg does
    assert ended == [("run-3", "cancelled")]
    assert receipt[0] == "done" and receipt[1] == "tr-1" and pb.Receipt.FromString(bytes(receipt[2])).code == "ok"

    # the folder's signed heads (taken on SQLite) are the anchors of the PostgreSQL log's verify
    verified = _warden("audit", "verify", "--store", migrated, "--data", str(folder))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"ok: {RECORDS} records" in verified.stdout and "3 signed anchor(s) hold" in verified.stdout

    again = _warden("store", "copy", str(folder), migrated)
    assert again.returncode == 1 and "already holds" in again.stderr, again.stdout + again.stderr
    assert _counts(migrated) == {DECISIONS: RECORDS, "checkpoint_single_use": 2, "checkpoint_ended_runs": 1,
                                 "toolrunner_receipts": 1}


def test_a_store_without_the_schema_is_refused_with_what_to_run(pg_url, tmp_path):
    folder = tmp_path / "data"
    _make_folder(folder, seal_at=None)
    done = _warden("store", "copy", str(folder), pg_url)
    assert done.returncode == 1 and "run `warden store migrate" in done.stderr, done.stdout + done.stderr
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(f"SELECT to_regclass('{DECISIONS}')").fetchone() == (None,)


def test_a_store_that_holds_decisions_is_never_merged_into(migrated, tmp_path):
    other = tmp_path / "other"
    _make_folder(other, seal_at=None)
    with DecisionLog(other / "decisions.db") as log:
        log.append(_record(0))
    assert _warden("store", "copy", str(other), migrated).returncode == 0
    before = _counts(migrated)

    folder = tmp_path / "data"
    _make_folder(folder)
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"already holds {RECORDS + 1} row(s) in {DECISIONS}" in done.stderr and "nothing written" in done.stderr
    assert _counts(migrated) == before


def test_a_tampered_record_is_refused_before_anything_is_written(migrated, tmp_path):
    folder = tmp_path / "data"
    log_path = _make_folder(folder, seal_at=None)
    with sqlite3.connect(log_path) as conn:
        conn.execute("UPDATE decisions SET verdict = 'ALLOW' WHERE seq = 150")
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "does not verify" in done.stderr and "BROKEN at seq 150" in done.stderr
    assert "copied" not in done.stdout
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)  # the other stores were not written either


def test_a_log_whose_first_records_were_pruned_is_refused(migrated, tmp_path):
    folder = tmp_path / "data"
    log_path = _make_folder(folder)
    prune(log_path, before_seq=121, key=heads.load_or_create_key(heads.key_path(log_path)))
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "records 1..120" in done.stderr and "pruned" in done.stderr, done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_a_call_still_marked_running_is_refused(migrated, tmp_path):
    folder = tmp_path / "data"
    _make_folder(folder, seal_at=None)
    receipts = SqliteReceipts(folder / "toolrunner.db", instance="tr-1")
    receipts.claim("d-2", "run-1", "refund")  # its container never reported back
    receipts.close()
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "1 call(s) still marked running" in done.stderr, done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_a_folder_with_only_receipts_copies_them_beside_a_copied_log(migrated, tmp_path):
    """A toolrunner keeps its own data folder: it is copied in a run of its own, into the same store."""
    checkpoint = tmp_path / "checkpoint"
    _make_folder(checkpoint, seal_at=None)
    (checkpoint / "toolrunner.db").unlink()
    assert _warden("store", "copy", str(checkpoint), migrated).returncode == 0
    runner = tmp_path / "toolrunner"
    runner.mkdir()
    receipts = SqliteReceipts(runner / "toolrunner.db", instance="tr-2")
    receipts.claim("d-9", "run-2", "search")
    receipts.finish(pb.Receipt(decision_id="d-9", run_id="run-2", tool="search", code="ok"))
    receipts.close()
    done = _warden("store", "copy", str(runner), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "decisions: no decisions.db (and its sealed segments) in" in done.stdout
    assert _counts(migrated)["toolrunner_receipts"] == 1 and _counts(migrated)[DECISIONS] == RECORDS


def test_a_log_of_an_older_schema_is_refused_not_rehashed(migrated, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    columns = SCHEMA_COLUMNS[3]
    conn = sqlite3.connect(folder / "decisions.db")
    conn.execute(f"CREATE TABLE decisions ({', '.join(columns)}, PRIMARY KEY (seq))")
    row = dict.fromkeys(columns[:-2]) | {"seq": 1, "decision_id": "d-1", "time": "2025-01-31T09:15:01.000000Z",
                                         "action": "tool_call", "verdict": "ALLOW"}
    digest = record_hash("0" * 64, tuple(row.values()), columns[:-2])
    conn.execute(f"INSERT INTO decisions VALUES ({', '.join('?' * len(columns))})", [*row.values(), "0" * 64, digest])
    conn.commit()
    conn.close()
    assert DecisionReader(folder / "decisions.db").verify().ok  # it verifies where it is
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "records of schema 3" in done.stderr, done.stdout + done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_a_log_changed_after_its_check_stops_the_copy_in_its_transaction(migrated, tmp_path, monkeypatch):
    monkeypatch.setattr(store_copy, "BATCH", 100)  # two batches are written before the changed record's
    folder = tmp_path / "data"
    log_path = _make_folder(folder, seal_at=None)
    real_read = pg_copy.COPY.read

    def read_then_tamper(src: Path):
        tables = real_read(src)  # checked: the chain verifies
        with sqlite3.connect(log_path) as conn:  # ... and then a record changes before it is written
            conn.execute("UPDATE decisions SET reason = 'rewritten' WHERE seq = 290")
        return tables

    stores = [replace(pg_copy.COPY, read=read_then_tamper)]
    db = Database(parse_store_url(migrated, default_folder="."), name="test", max_size=1).open()
    try:
        with pytest.raises(CopyRefused, match="changed during the copy: BROKEN at seq 290"):
            copy_folder(folder, db, stores, io.StringIO())
    finally:
        db.close()
    assert _counts(migrated)[DECISIONS] == 0  # the 200 written before it were rolled back with it


def test_a_long_copy_says_how_far_it_is(migrated, tmp_path, monkeypatch):
    folder = tmp_path / "data"
    _make_folder(folder)
    monkeypatch.setattr(store_copy, "BATCH", 50)
    monkeypatch.setattr(store_copy, "PROGRESS_EVERY", 100)
    out = io.StringIO()
    db = Database(parse_store_url(migrated, default_folder="."), name="test", max_size=1).open()
    try:
        written = copy_folder(folder, db, store_cli._load(store_cli.COPIES), out)
    finally:
        db.close()
    lines = [line for line in out.getvalue().splitlines() if line.startswith("decisions:") and line.endswith("copied")]
    assert lines == [f"decisions: {DECISIONS}: {n}/{RECORDS} copied" for n in (100, 200, 300)]
    assert written == RECORDS + 2 + 1 + 1


def test_records_deleted_from_the_end_are_caught_by_the_signed_heads_before_the_copy(migrated, tmp_path):
    folder = tmp_path / "data"
    log_path = _make_folder(folder, seal_at=None)
    with sqlite3.connect(log_path) as conn:  # the chain that is left still links: only a signed head shows the cut
        conn.execute(f"DELETE FROM decisions WHERE seq > {RECORDS - 10}")
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 1 and "does not verify" in done.stderr and f"seq {RECORDS}" in done.stderr, done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_the_folder_warden_up_made_is_copied_from_each_process_folder_at_once(migrated, tmp_path):
    root = tmp_path / "warden"
    _make_folder(root / "checkpoint", seal_at=None)
    (root / "checkpoint" / "toolrunner.db").unlink()
    receipts = SqliteReceipts(root / "toolrunner" / "toolrunner.db", instance="tr-2")
    receipts.claim("d-9", "run-2", "search")
    receipts.finish(pb.Receipt(decision_id="d-9", run_id="run-2", tool="search", code="ok"))
    receipts.close()
    done = _warden("store", "copy", str(root), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _counts(migrated) == {DECISIONS: RECORDS, "checkpoint_single_use": 2, "checkpoint_ended_runs": 1,
                                 "toolrunner_receipts": 1}


def test_two_folders_that_hold_the_same_store_are_refused(migrated, tmp_path):
    _make_folder(tmp_path / "a", seal_at=None)
    _make_folder(tmp_path / "b", seal_at=None)
    done = _warden("store", "copy", str(tmp_path / "a"), str(tmp_path / "b"), migrated)
    assert done.returncode == 1 and "decisions: both" in done.stderr, done.stdout + done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_what_is_no_copy_from_sqlite_to_a_reachable_postgresql_is_refused(pg_server, migrated, tmp_path):
    folder = tmp_path / "data"
    _make_folder(folder, seal_at=None)
    done = _warden("store", "copy", str(tmp_path / "missing"), migrated)
    assert done.returncode == 1 and "is no SQLite data folder" in done.stderr, done.stderr
    done = _warden("store", "copy", str(folder), f"sqlite://{tmp_path}/elsewhere")
    assert done.returncode == 1 and "is no PostgreSQL store" in done.stderr, done.stderr
    pg_server.stop()
    try:
        done = _warden("store", "copy", str(folder), migrated)
    finally:
        pg_server.start()
    assert done.returncode == 2 and "[store_unavailable]" in done.stderr, done.stdout + done.stderr
    assert _counts(migrated) == dict.fromkeys(TABLES, 0)


def test_the_catalog_and_the_learnings_move_in_the_order_they_were_written(migrated, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    catalog = AgentCatalog(folder / "catalog.db")
    for n in (3, 1, 2):  # written out of name order: the copy keeps the order they were written in
        catalog.record_revision(f"rev-{n}", [(f"agents/a{n}.yaml", f"name: a{n}\n".encode())])
    catalog.close()
    LearningStore(folder / "learnings.db").close()
    with sqlite3.connect(folder / "learnings.db") as conn:  # the one table shape (catalog_items.py)
        conn.execute("INSERT INTO catalog_items (kind, tenant, name, version, state, body) VALUES ('learning', "
                     "'acme', 'l-1', '', 'proposed', ?)",
                     [json.dumps({"text": "refunds above 100 need a second look", "proposed_at": 1.5})])
    done = _warden("store", "copy", str(folder), migrated)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "catalog: checkpoint_policy_revisions: 3/3 copied" in done.stdout
    with psycopg.connect(migrated) as conn:
        revisions = [r[0] for r in conn.execute("SELECT revision FROM checkpoint_policy_revisions ORDER BY _inserted")]
        learning = [(tenant, state, json.loads(body)["text"], json.loads(body)["proposed_at"]) for tenant, state, body
                    in conn.execute("SELECT tenant, state, body FROM checkpoint_catalog_items WHERE kind = 'learning'")]
    assert revisions == ["rev-3", "rev-1", "rev-2"]
    assert learning == [("acme", "proposed", "refunds above 100 need a second look", 1.5)]
    again = _warden("store", "copy", str(folder), migrated)
    assert again.returncode == 1 and "catalog: DST already holds 3 row(s) in checkpoint_policy_revisions" in again.stderr
