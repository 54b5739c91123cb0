"""A checkpoint on PostgreSQL keeps answering, each answer recorded, while the decision log's old
partitions are exported, sealed and dropped (`warden audit rotate|prune --store`), and the log
verifies from the seal afterwards. Real servers, a real cluster (tests/pgserver.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import psycopg

from checkpoint.audit.pg_log import PgDecisionLog
from checkpoint.audit.pg_schema import TABLE
from tests.audit.conftest import make_record
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.store.pg import Database

from .test_fleet_log import _checker, _records, store  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[2]


def _warden(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})


def test_checks_are_recorded_while_old_partitions_are_rotated_and_dropped(start, store, pg_url, tmp_path):  # noqa: F811
    # two small partitions of old records, then the one the checkpoint writes into
    with Database(store, name="test").open() as db:
        log = PgDecisionLog(db, partition_seqs=5)
        try:
            for _ in range(10):
                log.append(make_record())
        finally:
            log.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE}_p2 PARTITION OF {TABLE} FOR VALUES FROM (11) TO (1000001)")
    check = _checker(start(store=store))
    answers: list[pb.CheckResponse] = []
    stop = threading.Event()

    def load() -> None:
        n = 0
        while not stop.is_set():
            answers.append(check(n))
            n += 1

    loader = threading.Thread(target=load)
    loader.start()
    data = str(tmp_path / "retention")
    try:
        while len(answers) < 5:
            stop.wait(0.05)
        rotated = _warden("audit", "rotate", "--store", pg_url, "--data", data)
        pruned = _warden("audit", "prune", "--store", pg_url, "--data", data, "--before", "0s")
        during = len(answers)
        while len(answers) < during + 5:  # and after
            stop.wait(0.05)
    finally:
        stop.set()
        loader.join()
    assert rotated.returncode == 0 and "seqs 6..10" in rotated.stdout, rotated.stderr
    assert pruned.returncode == 0 and "dropped partition 1" in pruned.stdout, pruned.stderr
    assert {a.verdict for a in answers} == {pb.VERDICT_ALLOW}
    records = _records(store)
    assert records[0]["seq"] == 11  # the two old partitions are gone
    checked = [r for r in records if r["action"] == "tool_call" and r["tool"] == "get_task"]
    assert len(checked) == len(answers)  # every answer has its record
    verified = _warden("audit", "verify", "--store", pg_url, "--data", data)
    assert verified.returncode == 0, verified.stderr
    assert f"head seq {records[-1]['seq']}" in verified.stdout and "starts at the pruned head seq 10" in verified.stdout
