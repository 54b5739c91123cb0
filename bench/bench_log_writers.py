"""The decision log under several writer processes (`serve --workers N`): the two designs side by side.

- one file: every process appends to the same SQLite file, taking turns under a file lock and
  chaining onto the head it reads under that lock (DecisionLog(shared=True), what the checkpoint
  does);
- a segment per process: each appends to a file (and chain) of its own, with no lock between
  them. Its write side is the ceiling any per-worker design could reach; its cost is elsewhere
  (query, verify, export, WatchDecisions and signed heads would merge N chains; see
  docs/checkpoint-service.md, "The log under several writers").

Each process runs `--threads` appending threads (as a worker's gRPC threads do) for `--seconds`.
Reported: records/s over all processes and the median and p99 append latency.

    .venv/bin/python bench/bench_log_writers.py [--processes 1,2,4] [--threads 16] [--seconds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_audit import RECORD  # noqa: E402


def _writer(path: str, shared: bool, threads: int, seconds: float, start_at: float, out: multiprocessing.Queue) -> None:
    from checkpoint.audit import DecisionLog

    log = DecisionLog(path, shared=shared)
    for _ in range(50):
        log.append(RECORD)
    latencies: list[list[float]] = [[] for _ in range(threads)]

    def run(t: int) -> None:
        mine = latencies[t]
        while time.time() < start_at:
            time.sleep(0.001)
        deadline = start_at + seconds
        while time.time() < deadline:
            t0 = time.perf_counter_ns()
            log.append(RECORD)
            mine.append((time.perf_counter_ns() - t0) / 1000)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    log.close()
    out.put([x for xs in latencies for x in xs])


def measure(processes: int, shared: bool, threads: int, seconds: float, folder: Path) -> dict[str, float]:
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    start_at = time.time() + 1.0 + 0.2 * processes  # every process opened its log before the clock starts
    procs = []
    for i in range(processes):
        path = folder / ("one.db" if shared else f"segment-{i}.db")
        procs.append(ctx.Process(target=_writer, args=(str(path), shared, threads, seconds, start_at, out)))
    for p in procs:
        p.start()
    lat = sorted(x for _ in procs for x in out.get(timeout=seconds + 120))
    for p in procs:
        p.join()
    return {"rps": len(lat) / seconds, "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--threads", type=int, default=16, help="appending threads per process (default 16)")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    print(f"decision log, several writer processes x {args.threads} threads, {args.seconds:.0f} s each, "
          f"synchronous=NORMAL; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'design':<22} {'processes':>9} {'records/s':>10} {'p50 us':>8} {'p99 us':>8}")
    for n in (int(x) for x in args.processes.split(",")):
        for shared, name in ((True, "one file, file lock"), (False, "segment per process")):
            with tempfile.TemporaryDirectory(prefix="warden-bench-writers-") as folder:
                r = measure(n, shared, args.threads, args.seconds, Path(folder))
                if shared:
                    from checkpoint.audit import DecisionLog

                    report = DecisionLog(Path(folder) / "one.db").verify()
                    assert report.ok, report  # the one chain took every process's records
            print(f"{name:<22} {n:>9} {r['rps']:>10.0f} {r['p50']:>8.0f} {r['p99']:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
