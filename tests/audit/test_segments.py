"""Retention: the log seals into segments whose chain continues; reads, stats and verify span
them; verify catches a tampered or deleted segment, an altered manifest and a truncated live file;
pruning keeps what remains provable (docs/audit.md, "Retention")."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog, DecisionReader
from checkpoint.audit import segments as seg
from checkpoint.audit.rotate import AutoRotate, RotateError, prune, rotate
from checkpoint.audit.stats import AgentStats
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]


def _fill(log: DecisionLog, make_record, n: int, **fields) -> list[int]:
    return [log.append(make_record(**fields)) for _ in range(n)]


def _seqs(path: Path, **filters) -> list[int]:
    return [r["seq"] for r in DecisionReader(path).read(**filters)]


def _sql(path: Path, sql: str, *params) -> None:
    os.chmod(path, 0o600)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(sql, params)
    conn.close()


@pytest.fixture
def sealed(log, log_path, make_record):
    """60 records: 1..20 in segment 1, 21..45 in segment 2, 46..60 live."""
    _fill(log, make_record, 30)
    assert rotate(log_path, upto=20).last_seq == 20
    _fill(log, make_record, 16, run_id="run-2")
    assert rotate(log_path, upto=45).number == 2
    _fill(log, make_record, 14, run_id="run-2", agent="billing")
    return log_path


def test_reads_span_segments_and_the_live_file(log, sealed, make_record, capsys):
    live = sqlite3.connect(sealed)
    assert live.execute("SELECT min(seq), max(seq) FROM decisions").fetchone() == (46, 60)
    live.close()
    assert _seqs(sealed) == list(range(1, 61))
    assert _seqs(sealed, run_id="run-2") == list(range(31, 61))
    assert [r["seq"] for r in DecisionReader(sealed).read(15, limit=10)] == list(range(16, 26))
    assert [r["seq"] for r in DecisionReader(sealed).tail(20)] == list(range(41, 61))
    assert [r["seq"] for r in DecisionReader(sealed).tail(3, agent="support")] == [44, 45, 46]
    assert log.head()[0] == 60
    report = log.verify()
    assert report.ok and report.checked == 60 and report.segments == 2, report.summary()
    # the CLI: query, export and verify across them
    assert main(["audit", "query", "--log", str(sealed), "--format", "jsonl", "--all"]) == 0
    assert [json.loads(x)["seq"] for x in capsys.readouterr().out.splitlines()] == list(range(1, 61))
    assert main(["audit", "export", "--log", str(sealed), "--after", "40"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 20
    assert main(["audit", "verify", "--log", str(sealed)]) == 0
    assert "2 sealed segment(s)" in capsys.readouterr().out
    # the writer goes on after the sealed head
    seq = log.append(make_record())
    assert seq == 61 and log.verify().ok
    # per-agent statistics count every record once
    _, versions = AgentStats(sealed).current("support")
    assert sum(v.runs for v in versions) == 2


def test_sealed_segments_are_read_only_files_listed_in_a_signed_manifest(sealed):
    manifest = seg.read_manifest(sealed)
    assert [(s.first_seq, s.last_seq, s.records) for s in manifest.seals] == [(1, 20, 20), (21, 45, 25)]
    assert manifest.seals[1].first_prev_hash == manifest.seals[0].last_hash
    for s in manifest.seals:
        assert oct(os.stat(seg.folder(sealed) / s.file).st_mode & 0o777) == "0o400"


def test_the_newest_record_stays_in_the_live_file(log, log_path, make_record):
    _fill(log, make_record, 3)
    assert rotate(log_path).last_seq == 2
    assert rotate(log_path) is None  # one record left: nothing to seal
    log.close()
    with DecisionLog(log_path) as again:  # a restart reads the head from the live file
        assert again.append(make_record()) == 4
        assert again.verify().ok


def test_a_stale_writer_cannot_reuse_a_sealed_seq(log, log_path, make_record):
    """Two writers on one file (checkpoint serve --workers N): A's kept head goes stale while B
    appends and the file is sealed; A's next insert at a freed seq is refused inside SQLite and A
    chains from the real head."""
    _fill(log, make_record, 2)
    other = DecisionLog(log_path)
    try:
        _fill(other, make_record, 20)
        rotate(log_path)  # seqs 1..21 sealed and deleted from the live file
        assert log.append(make_record(decision_id="from-stale")) == 23
    finally:
        other.close()
    assert log.verify().ok and len(_seqs(log_path)) == 23


def test_rotation_under_concurrent_appends_loses_nothing(log, log_path, make_record):
    """Eight threads here and two writer processes append while the log is sealed again and again."""
    stop = threading.Event()
    got: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        while not stop.is_set():
            seq = log.append(make_record())
            with lock:
                got.append(seq)

    script = (
        "import sys; from checkpoint.audit import DecisionLog\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r}); from conftest import make_record\n"
        f"log = DecisionLog({str(log_path)!r})\n"
        "for _ in range(300): print(log.append(make_record(caller='proc')), flush=True)\n"
        "log.close()\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    threads = [threading.Thread(target=writer) for _ in range(8)]
    for t in threads:
        t.start()
    seals = 0
    try:
        while any(p.poll() is None for p in procs) or seals < 5:
            if rotate(log_path) is not None:
                seals += 1
    finally:
        stop.set()
        for t in threads:
            t.join()
    from_procs = []
    for p in procs:
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 0
        from_procs += [int(x) for x in out.split()]
    rotate(log_path)
    seqs = _seqs(log_path)
    assert seqs == list(range(1, len(seqs) + 1))  # every seq once, none twice
    assert set(got) | set(from_procs) <= set(seqs) and len(got) + len(from_procs) == len(seqs)
    assert len(from_procs) == 600
    report = log.verify()
    assert report.ok and report.checked == len(seqs), report.summary()
    assert report.segments >= 5


def test_verify_catches_a_record_edited_in_a_segment(sealed):
    _sql(seg.folder(sealed) / seg.segment_name(2), "UPDATE decisions SET verdict = 'DENY' WHERE seq = 30")
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 30, "hash_mismatch")


def test_verify_catches_a_segment_changed_beside_its_records(sealed):
    _sql(seg.folder(sealed) / seg.segment_name(1), "CREATE TABLE notes (x)")
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "segment_altered") and "sha256" in report.detail


def test_verify_catches_records_cut_from_the_end_of_a_segment(sealed):
    _sql(seg.folder(sealed) / seg.segment_name(1), "DELETE FROM decisions WHERE seq > 18")
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "segment_altered"), report.summary()


def test_verify_catches_a_deleted_middle_segment(sealed, capsys):
    (seg.folder(sealed) / seg.segment_name(1)).unlink()
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 1, "segment_missing")
    assert main(["audit", "verify", "--log", str(sealed)]) == 1
    assert "segment_missing" in capsys.readouterr().err


def test_verify_catches_a_manifest_line_removed_with_its_segment(sealed):
    path = seg.manifest_path(sealed)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[1])  # segment 1's seal gone (and its file)
    (seg.folder(sealed) / seg.segment_name(1)).unlink()
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "manifest_invalid")


def test_verify_catches_an_altered_or_foreign_signed_manifest(sealed, tmp_path, capsys):
    path = seg.manifest_path(sealed)
    original = path.read_text()
    entry = json.loads(original.splitlines()[0])
    entry["last_seq"] = 19
    path.write_text(json.dumps(entry) + "\n" + original.splitlines(keepends=True)[1])
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "manifest_invalid") and "not signed" in report.detail
    path.write_text(original)
    # checked with the auditor's own key: a manifest signed by another key does not hold
    from checkpoint.audit.heads import load_or_create_key, public_pem

    other = tmp_path / "other.pub"
    other.write_text(public_pem(load_or_create_key(tmp_path / "other.key").public_key()))
    assert main(["audit", "verify", "--log", str(sealed), "--pubkey", str(other)]) == 1
    assert "not signed by key" in capsys.readouterr().err


def test_verify_catches_a_live_file_truncated_after_rotation(sealed):
    """Each seal signs the live head it left behind (seq 46 here): a live file cut back to before it,
    or emptied, no longer reaches it. (Records cut after the newest signed head are what signed heads
    are for, as without segments.)"""
    _sql(sealed, "DELETE FROM decisions WHERE seq >= 46")
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "truncated") and "segment 2 was sealed" in report.detail
    assert report.detail.startswith("the log ends at seq 45")


def test_verify_catches_a_live_file_replaced_by_a_new_one(sealed, make_record):
    for suffix in ("", "-wal", "-shm"):
        Path(f"{sealed}{suffix}").unlink(missing_ok=True)
    with DecisionLog(sealed) as fresh:  # the chain continues from the sealed head, but seq 46 is another
        assert fresh.append(make_record()) == 46
        report = fresh.verify()
    assert (report.ok, report.reason) == (False, "head_mismatch"), report.summary()


def test_verify_catches_a_live_record_edited_after_rotation(sealed):
    _sql(sealed, "UPDATE decisions SET tenant = 'globex' WHERE seq = 50")
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 50, "hash_mismatch")


def test_prune_keeps_verify_green_from_the_sealed_head(log, sealed, make_record, capsys):
    assert main(["audit", "prune", "--log", str(sealed), "--before", "30"]) == 0  # segment 1 ends at 20 < 30
    assert "pruned segment-000001.db" in capsys.readouterr().out
    assert not (seg.folder(sealed) / seg.segment_name(1)).exists()
    first = seg.read_manifest(sealed).seals[0]
    report = log.verify()
    assert report.ok and (report.start_seq, report.start_hash) == (20, first.last_hash), report.summary()
    assert report.checked == 40
    assert main(["audit", "verify", "--log", str(sealed)]) == 0
    assert "starts at the pruned head seq 20" in capsys.readouterr().out
    assert _seqs(sealed)[0] == 21
    # the pruned head still anchors: a record rewritten right after it breaks the link
    _sql(seg.folder(sealed) / seg.segment_name(2), "UPDATE decisions SET prev_hash = ? WHERE seq = 21", "f" * 64)
    assert log.verify().reason == "broken_link"


def test_prune_by_time_only_takes_the_oldest_segments(log, sealed):
    assert prune(sealed, before_time="0000") == []
    assert [s.number for s in prune(sealed, before_time="9999")] == [1, 2]  # the live file is never pruned
    report = log.verify()
    assert report.ok and report.start_seq == 45 and report.checked == 15


def test_an_anchor_in_a_pruned_segment_is_counted_not_failed(log, sealed):
    from checkpoint.audit.verify import Anchor

    prune(sealed, before_seq=21)
    report = log.verify(anchors=[Anchor(5, "0" * 64, "an old anchor")])
    assert report.ok and report.unchecked_anchors == 1


def test_a_broken_chain_is_never_sealed(log, log_path, make_record):
    _fill(log, make_record, 10)
    _sql(log_path, "UPDATE decisions SET tenant = 'globex' WHERE seq = 4")
    with pytest.raises(RotateError, match="broken chain"):
        rotate(log_path)
    assert seg.read_manifest(log_path).seals == []
    assert list(seg.folder(log_path).glob("segment-*")) == []


def test_auto_rotate_by_size_and_age(log, log_path, make_record):
    _fill(log, make_record, 200)
    assert AutoRotate(log_path, max_bytes=10**9).check_now() is None
    assert AutoRotate(log_path, max_bytes=4096).check_now().last_seq == 199
    _fill(log, make_record, 5)
    assert AutoRotate(log_path, max_age_seconds=3600).check_now() is None
    assert AutoRotate(log_path, max_age_seconds=1e-6).check_now().last_seq == 204
    assert log.verify().ok


def test_rotate_and_prune_from_the_command_line(log, log_path, make_record, capsys):
    _fill(log, make_record, 10)
    data = str(log_path.parent)
    assert main(["audit", "rotate", "--data", data, "--upto", "4"]) == 0
    assert "sealed seqs 1..4" in capsys.readouterr().out
    assert main(["audit", "rotate", "--data", data]) == 0
    assert "sealed seqs 5..9" in capsys.readouterr().out
    assert main(["audit", "prune", "--data", data, "--before", "yesterday"]) == 0
    assert "nothing to prune" in capsys.readouterr().err
    assert main(["audit", "rotate", "--data", str(log_path.parent / "nowhere")]) == 2


def test_a_follower_misses_nothing_while_the_log_is_sealed(log, log_path, make_record):
    """WatchDecisions and `audit tail -f` follow across seals: records moved out of the live file
    while the follower pages through it are read from their new segment."""
    stop = threading.Event()
    seen: list[int] = []
    follower = threading.Thread(target=lambda: seen.extend(
        r["seq"] for r in log.follow(0, stop_event=stop, poll_interval=0.01)))
    follower.start()
    for _ in range(20):
        _fill(log, make_record, 25)
        rotate(log_path)
    total = log.head()[0]
    while len(seen) < total and follower.is_alive():
        threading.Event().wait(0.05)
    stop.set()
    log.wake_followers()
    follower.join(10)
    assert seen == list(range(1, total + 1))


def test_an_unreadable_manifest_fails_reads_closed_and_breaks_verify(sealed, capsys):
    path = seg.manifest_path(sealed)
    path.write_text("not json\n" + path.read_text())
    report = DecisionReader(sealed).verify()
    assert (report.ok, report.reason) == (False, "manifest_invalid")
    assert main(["audit", "verify", "--log", str(sealed)]) == 1
    for command in ("query", "export", "tail"):
        assert main(["audit", command, "--log", str(sealed)]) == 2, command
        assert "manifest" in capsys.readouterr().err
    from checkpoint.audit import AuditUnavailable

    with pytest.raises(AuditUnavailable, match="manifest"):
        list(DecisionReader(sealed).read())


def test_two_workers_that_both_find_the_log_due_seal_it_once(log_path, make_record):
    """`serve --workers 2 --rotate-size`: every worker runs its own AutoRotate. Worker B finds the log
    due, then waits for the rotate lock while worker A seals it; a few records arrive meanwhile. B
    must look again under the lock, not seal those few into a segment of their own (the merged run
    made segments of 5 records beside ones of 200)."""
    with DecisionLog(log_path) as log:
        for _ in range(200):
            log.append(make_record())
        worker_a, worker_b = AutoRotate(log_path, max_bytes=65536), AutoRotate(log_path, max_bytes=65536)
        looked = []

        def b_looks_while_a_seals() -> bool:
            due = AutoRotate.due(worker_b)
            if not looked:  # B's first look: A seals, records arrive, then B goes for the lock
                looked.append(due)
                assert worker_a.check_now() is not None
                for _ in range(3):
                    log.append(make_record())
            return due

        worker_b.due = b_looks_while_a_seals  # type: ignore[method-assign]
        assert worker_b.check_now() is None
    assert looked == [True]
    assert len(seg.read_manifest(log_path).seals) == 1
    assert DecisionReader(log_path).verify().ok
