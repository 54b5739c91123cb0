"""A seal or prune killed (SIGKILL) after each of its steps: no record is lost, none is read or
counted twice, the chain verifies, the writer goes on, and the next rotation finishes the job."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog, DecisionReader
from checkpoint.audit import segments as seg
from checkpoint.audit.rotate import rotate

KILLED_AT = """
import os, signal, sys
from pathlib import Path
from checkpoint.audit import rotate as r
path, step, op = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
r.DELETE_CHUNK = 7  # so a kill can land between two chunks of the live file's deletes
def die(name):
    if name == step:
        os.kill(os.getpid(), signal.SIGKILL)
r._step = die
if op == "rotate":
    r.rotate(path)
else:
    r.prune(path, before_seq=int(sys.argv[4]))
print("finished without reaching", step)
"""


def _killed(path: Path, step: str, op: str = "rotate", *extra: str) -> None:
    got = subprocess.run([sys.executable, "-c", KILLED_AT, str(path), step, op, *extra],
                         capture_output=True, text=True, timeout=120)
    assert got.returncode == -signal.SIGKILL, (got.stdout, got.stderr)


def _whole(path: Path, n: int) -> None:
    """Every seq 1..n read exactly once, and the chain verifies with n records."""
    seqs = [r["seq"] for r in DecisionReader(path).read()]
    assert seqs == list(range(1, n + 1))
    report = DecisionReader(path).verify()
    assert report.ok and report.checked == n and report.head_seq == n, report.summary()


@pytest.fixture
def forty(log, log_path, make_record):
    for _ in range(10):
        log.append(make_record())
    rotate(log_path)  # segment 1: seqs 1..9
    for _ in range(30):
        log.append(make_record())
    log.close()
    return log_path


@pytest.mark.parametrize("step", ["segment_tmp", "segment_written", "manifest_appended", "deleted_chunk",
                                  "live_deleted"])
def test_a_seal_killed_after_each_step(forty, make_record, step):
    _killed(forty, step)
    _whole(forty, 40)
    live = sqlite3.connect(forty)
    before = live.execute("SELECT count(*) FROM decisions").fetchone()[0]
    live.close()
    with DecisionLog(forty) as log:  # the checkpoint starts again and writes on
        assert log.append(make_record()) == 41
    _whole(forty, 41)
    sealed = rotate(forty)  # the next rotation repairs what was left, then seals
    assert sealed is not None and sealed.last_seq == 40
    _whole(forty, 41)
    manifest = seg.read_manifest(forty)
    assert [(s.number, s.first_seq, s.last_seq) for s in manifest.seals][-1][1:] == (sealed.first_seq, 40)
    assert [s.number for s in manifest.seals] == list(range(1, len(manifest.seals) + 1))
    live = sqlite3.connect(forty)
    assert live.execute("SELECT min(seq), count(*) FROM decisions").fetchone() == (41, 1)
    live.close()
    folder = seg.folder(forty)
    assert sorted(p.name for p in folder.glob("segment-*")) == [s.file for s in manifest.seals]
    if step in ("manifest_appended", "deleted_chunk"):
        assert before > 1  # the kill did leave sealed records in the live file, and they were not read twice


def test_a_prune_killed_between_its_line_and_the_file(forty):
    rotate(forty)  # segment 2: 10..39
    _killed(forty, "prune_appended", "prune", "20")
    folder = seg.folder(forty)
    assert (folder / seg.segment_name(1)).exists()  # the file outlived its prune
    report = DecisionReader(forty).verify()
    assert report.ok and report.start_seq == 9, report.summary()
    assert [r["seq"] for r in DecisionReader(forty).read()][0] == 10
    rotate(forty)  # repairs: the pruned file goes
    assert not (folder / seg.segment_name(1)).exists()
    assert DecisionReader(forty).verify().ok


def test_a_manifest_line_cut_off_mid_write_is_not_an_entry(forty):
    path = seg.manifest_path(forty)
    whole = path.read_bytes()
    path.write_bytes(whole + whole[: len(whole) // 2])  # a crash while a second seal was appended
    _whole(forty, 40)
    assert rotate(forty) is not None  # the cut line is dropped first
    assert path.read_bytes().startswith(whole) and path.read_bytes().count(b"\n") == 2
    _whole(forty, 40)
