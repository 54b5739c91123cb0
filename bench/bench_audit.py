"""Decision log throughput and latency: appends/second from 1 and 32 threads (group commit),
median and p99 append latency, for synchronous=NORMAL (default) and FULL.

    .venv/bin/python bench/bench_audit.py [--records N] [--threads 1,32] [--sync NORMAL,FULL]
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
from checkpoint.audit.record import GENESIS_HASH, record_hash, to_row  # noqa: E402

RECORD = {
    "tenant": "acme",
    "run_id": "run-1",
    "root_run_id": "run-1",
    "actor_chain": [
        {"kind": "person", "id": "ann"},
        {"kind": "agent", "id": "support", "agent_version": "v1"},
    ],
    "accountable_person": "ann",
    "agent": "support",
    "agent_version": "v1",
    "action": "tool_call",
    "tool": "refund",
    "arguments": {"order": "o-1", "amount": 12.5, "card": {"number": "sha256:" + "ab" * 32}},
    "verdict": "ALLOW",
    "code": "allowed",
    "rule": "allowlist",
    "reason": "refund is on support's allowlist",
    "policy_revision": "rev-1",
    "latency_us": 31,
}


def run(threads: int, records: int, synchronous: str, folder: Path) -> dict[str, float]:
    path = folder / f"bench-{threads}-{synchronous}.db"
    log = DecisionLog(path, synchronous=synchronous)  # type: ignore[arg-type]
    for _ in range(200):  # warm up: schema, page cache, WAL
        log.append(RECORD)
    per_thread = records // threads
    latencies: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)

    def worker(t: int) -> None:
        mine = latencies[t]
        start.wait()
        for _ in range(per_thread):
            t0 = time.perf_counter_ns()
            log.append(RECORD)
            mine.append((time.perf_counter_ns() - t0) / 1000)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    before = log.stats()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    after = log.stats()
    log.close()
    assert log.verify().ok
    flat = sorted(x for lat in latencies for x in lat)
    done = per_thread * threads
    return {
        "appends_per_s": done / elapsed,
        "median_us": statistics.median(flat),
        "p99_us": flat[int(len(flat) * 0.99) - 1],
        "mean_batch": done / max(1, after["batches"] - before["batches"]),
    }


def cpu_cost(n: int = 20000) -> float:
    """Microseconds of pure Python work per record (validate + canonical JSON + hash), no I/O."""
    t0 = time.perf_counter()
    prev = GENESIS_HASH
    for seq in range(1, n + 1):
        values = to_row(RECORD)
        prev = record_hash(prev, (seq, *values))
    return (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--threads", default="1,32")
    parser.add_argument("--sync", default="NORMAL,FULL")
    # Called as bench_audit.main() by `python -m bench`, whose own argv is not ours.
    args = parser.parse_args(argv if argv is not None else [])
    print(f"per-record CPU (validate + canonical JSON + sha256, no I/O): {cpu_cost():.1f} us")
    print(f"{'sync':<7} {'threads':>7} {'appends/s':>11} {'median us':>10} {'p99 us':>9} {'mean batch':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for synchronous in args.sync.split(","):
            for threads in (int(t) for t in args.threads.split(",")):
                records = args.records if synchronous == "NORMAL" else max(args.records // 4, threads * 50)
                r = run(threads, records, synchronous, Path(tmp))
                print(
                    f"{synchronous:<7} {threads:>7} {r['appends_per_s']:>11,.0f} {r['median_us']:>10.1f} "
                    f"{r['p99_us']:>9.1f} {r['mean_batch']:>11.1f}"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
