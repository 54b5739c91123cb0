"""Decision log retention: bytes per record (live file and sealed segment), sealing, verifying and
reading across segments, and what the append-only trigger costs an append.

    .venv/bin/python -m bench retention            (or: python bench/bench_retention.py [--records N])
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint.audit import DecisionLog, DecisionReader  # noqa: E402
from checkpoint.audit.rotate import rotate  # noqa: E402
from checkpoint.audit.segments import folder  # noqa: E402
from checkpoint.audit.store import APPEND_ONLY_SQL  # noqa: E402


def record(i: int) -> dict:
    """A tool call as the checkpoint records one: ids are UUIDs, the arguments masked JSON."""
    run = f"run-{i // 40:08d}"
    return {
        "decision_id": str(uuid.uuid4()), "tenant": "acme", "run_id": run, "root_run_id": run,
        "actor_chain": [{"kind": "person", "id": "ann"}, {"kind": "agent", "id": "support", "agent_version": "v3"}],
        "accountable_person": "ann", "agent": "support", "agent_version": "v3", "action": "tool_call",
        "tool": "refund", "arguments": {"order": f"o-{i}", "amount": 12.5, "card": {"number": "sha256:" + "ab" * 32}},
        "verdict": "ALLOW", "code": "allowed", "rule": "allowlist", "reason": "refund is on support's allowlist",
        "policy_revision": "e4cc61fd534393f3", "latency_us": 31, "principal": "driver", "caller": "driver",
        "trace_id": uuid.uuid4().hex,
    }


def _size(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return os.path.getsize(path)


def median_append_us(path: Path, n: int, trigger: bool) -> float:
    log = DecisionLog(path)
    if trigger:  # as the first seal leaves it
        log._conn.execute(APPEND_ONLY_SQL)  # type: ignore[union-attr]
    rec = record(0)
    for _ in range(200):
        log.append(rec)
    took = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        log.append(rec)
        took.append(time.perf_counter_ns() - t0)
    log.close()
    return statistics.median(took) / 1000


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--trigger-rounds", type=int, default=6)
    args = parser.parse_args(argv)
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decisions.db"
        with DecisionLog(path) as log:
            t0 = time.perf_counter()
            for i in range(n):
                log.append(record(i))
            took = time.perf_counter() - t0
        live = _size(path)
        print(f"appended {n} records in {took:.1f} s; live file {live / 1e6:.1f} MB = {live / n:.0f} B/record "
              "(indexes on run_id and agent included)")
        t0 = time.perf_counter()
        seal = rotate(path)
        took = time.perf_counter() - t0
        assert seal is not None
        segment = folder(path) / seal.file
        size = segment.stat().st_size
        print(f"sealed {seal.records} records in {took:.2f} s ({seal.records / took:,.0f} records/s, chain checked); "
              f"segment {size / 1e6:.1f} MB = {size / seal.records:.0f} B/record")
        print(f"live file after the seal: {_size(path) / 1e6:.1f} MB on disk (freed pages are reused by new records)")
        t0 = time.perf_counter()
        report = DecisionReader(path).verify()
        took = time.perf_counter() - t0
        assert report.ok, report.summary()
        print(f"verify across segment + live: {report.checked} records in {took:.2f} s "
              f"({report.checked / took:,.0f} records/s)")
        t0 = time.perf_counter()
        count = sum(1 for _ in DecisionReader(path).read())
        took = time.perf_counter() - t0
        print(f"read across segment + live: {count} records in {took:.2f} s ({count / took:,.0f} records/s)")
        with_trigger, without = [], []
        for r in range(args.trigger_rounds):  # alternated, so a noisy neighbour hits both alike
            with_trigger.append(median_append_us(Path(tmp) / f"t{r}.db", 3000, True))
            without.append(median_append_us(Path(tmp) / f"n{r}.db", 3000, False))
        print(f"median append, 1 thread (median of {args.trigger_rounds} rounds): a sealed log (append-only trigger) "
              f"{statistics.median(with_trigger):.1f} us, a log never sealed {statistics.median(without):.1f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
