"""Per-version statistics over a decision log: a recompute from scratch over N records, and a read
that folds in only what was committed since the last one (what the AgentStats RPC and a metrics
scrape pay once the checkpoint has read the log once).

    .venv/bin/python bench/bench_agent_stats.py [--records 100000] [--repeat 3]

The log is a mix like a busy checkpoint's: per run a start, model calls and tool calls (with
arguments, which the statistics do not read), and an end; some runs trip a breaker first.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint.audit import DecisionLog  # noqa: E402
from checkpoint.audit.stats import AgentStats  # noqa: E402

RECORDS_PER_RUN = 10  # start_run, 4 model calls, 4 tool calls, end


def run_records(n: int) -> list[dict]:
    run = f"run-{n:08d}"
    version = f"v{n % 3}"
    base = {"tenant": "acme", "run_id": run, "root_run_id": run, "agent": "recon", "agent_version": version,
            "accountable_person": "alice", "policy_revision": "rev-1", "latency_us": 30,
            "actor_chain": [{"kind": "person", "id": "alice"}, {"kind": "agent", "id": "recon",
                                                                "agent_version": version, "run_id": run}]}
    out = [dict(base, action="start_run", verdict="ALLOW", code="allowed", arguments={"mode": "interactive"})]
    for turn in range(4):
        out.append(dict(base, action="model_call", verdict="ALLOW", code="allowed",
                        arguments={"provider": "scripted", "model": "m", "max_tokens": 4096, "input_tokens": 900}))
        out.append(dict(base, action="tool_call", tool="get_task", verdict="ALLOW", code="allowed",
                        arguments={"task_id": f"task-{n}-{turn}", "note": "x" * 120}))
    tripped = n % 7 == 0
    if tripped:
        out[-1] = dict(base, action="model_call", verdict="HALT", code="breaker_turns",
                       arguments={"provider": "scripted", "model": "m", "max_tokens": 4096, "input_tokens": 900})
    status = "paused" if tripped else ("failed" if n % 11 == 0 else "succeeded")
    out.append(dict(base, action="end", verdict="ALLOW", code="recorded", arguments={
        "person": "", "note": "", "details": {"status": status, "code": status, "tokens": 4000 + n % 500, "turns": 4}}))
    return out


def fill(log: DecisionLog, records: int, threads: int = 8) -> None:
    runs = records // RECORDS_PER_RUN

    def worker(first: int) -> None:
        for n in range(first, runs, threads):
            for record in run_records(n):
                log.append(record)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "decisions.db"
        log = DecisionLog(path)
        started = time.perf_counter()
        fill(log, args.records)
        head = log.head()[0]
        print(f"log: {head:,} records written in {time.perf_counter() - started:.1f} s")
        stats = AgentStats(path)
        full = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            seq, versions = stats.recompute("recon")
            full.append(time.perf_counter() - t0)
        assert seq == head and sum(v.runs for v in versions) == args.records // RECORDS_PER_RUN
        print(f"recompute from scratch over {head:,} records: median {statistics.median(full) * 1000:.0f} ms "
              f"({head / statistics.median(full):,.0f} records/s; runs {sum(v.runs for v in versions):,})")
        t0 = time.perf_counter()
        stats.current("recon")
        print(f"read with nothing new: {(time.perf_counter() - t0) * 1000:.2f} ms")
        more = 1000
        for n in range(10**6, 10**6 + more // RECORDS_PER_RUN):
            for record in run_records(n):
                log.append(record)
        t0 = time.perf_counter()
        seq, _ = stats.current("recon")
        print(f"read after {seq - head:,} new records: {(time.perf_counter() - t0) * 1000:.1f} ms")
        log.close()


if __name__ == "__main__":
    main(sys.argv[1:])
