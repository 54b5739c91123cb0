"""Check() through a fleet: one, two and four checkpoint replicas on one PostgreSQL, beside one
checkpoint on SQLite, and what one decision's write costs on each backend.

Every checkpoint is a real `warden checkpoint serve` process on a loopback port. The PostgreSQL is
a throwaway cluster (tests/pgserver.py's) with durable commits (fsync, synchronous_commit and
full_page_writes on), since record-before-answer is what is measured; `--store URL` names a server
of your own whose databases this may create and drop. The SQLite checkpoint runs with the default
`--durability NORMAL` and with `FULL` (an fsync per batch, the durable peer of PostgreSQL's).

A client process (grpc.aio) keeps `--concurrency` calls in flight, spread evenly over the replicas,
each call the same allowed `get_task` of one run started at the first replica. A measurement ends
after `--seconds` or `--calls` answers, whichever comes first. Then the replicas are stopped and the
log verified: its chain holds and it has at least one record per answer given (record before
answer, kept in all). Every configuration runs `--runs` times, round-robin with the others, each on
a fresh database and fresh data folders.

The write cost: one thread appending `--records` decisions to each backend's log directly (no
server, no batching with others: one commit per record), microseconds per record.

    .venv/bin/python bench/bench_fleet.py [--replicas 1,2,4] [--seconds 5] [--calls 100000]
        [--concurrency 32] [--runs 2] [--records 1000] [--store postgresql://...]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import grpc  # noqa: E402

from bench import fleet_nodes as nodes  # noqa: E402
from bench.bench_audit import RECORD  # noqa: E402
from bench.bench_grpc import METHOD, _cpu_seconds, _free_port, _request, _start_run, _wait_ready  # noqa: E402
from warden.checkpoint.v1 import checkpoint_pb2 as pb  # noqa: E402

WARM_UP = 20  # calls per replica before the clock starts: connections made, caches filled


async def _load(targets: list[str], request: bytes, token: str, concurrency: int, *,
                seconds: float, calls: int) -> dict[str, Any]:
    """Calls per second and latencies over every replica; every answer must be an ALLOW (a DENY
    `audit_unavailable` would be a fleet that failed to record, not one that is fast)."""
    metadata = (("authorization", f"Bearer {token}"),)
    channels = [grpc.aio.insecure_channel(t) for t in targets]
    try:
        stubs = [c.unary_unary(METHOD, response_deserializer=pb.CheckResponse.FromString) for c in channels]

        async def one(stub: Any) -> None:
            answer = await stub(request, metadata=metadata, timeout=30)
            if answer.verdict != pb.VERDICT_ALLOW:
                raise RuntimeError(f"the bench call was not allowed: {answer.code} {answer.reason}")

        for stub in stubs:
            for _ in range(WARM_UP):
                await one(stub)
        latencies: list[int] = []
        remaining = [calls]
        deadline = time.perf_counter() + seconds

        async def worker(stub: Any) -> None:
            while remaining[0] > 0 and time.perf_counter() < deadline:
                remaining[0] -= 1
                t0 = time.perf_counter_ns()
                await one(stub)
                latencies.append(time.perf_counter_ns() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(worker(stubs[i % len(stubs)]) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        for channel in channels:
            await channel.close()
    latencies.sort()
    n = len(latencies)
    return {"answers": n + WARM_UP * len(targets), "rps": n / elapsed,
            "p50": latencies[n // 2] / 1000, "p99": latencies[min(n - 1, int(n * 0.99))] / 1000}


def _records(store: str | None, data: Path) -> tuple[bool, int]:
    """Whether the decision log's chain holds, and how many records it has."""
    if store:
        from checkpoint.audit.pg_reader import PgDecisionReader
        from warden.store.pg import Database
        from warden.store.url import parse_store_url

        with Database(parse_store_url(store, default_folder=data), name="bench-verify").open() as db:
            report = PgDecisionReader(db).verify()
    else:
        from checkpoint.audit import DecisionLog

        log = DecisionLog(data / "decisions.db")
        try:
            report = log.verify()
        finally:
            log.close()
    return report.ok, report.checked


def measure(replicas: int, *, admin: str | None, durability: str, run: int, args: argparse.Namespace) -> dict[str, Any]:
    """One configuration once: start its checkpoints, load them, stop them, check the log."""
    name = f"bench_fleet_{replicas}_{run}"
    store = nodes.fresh_database(admin, name) if admin else None
    token = secrets.token_urlsafe(32)
    with tempfile.TemporaryDirectory(prefix="warden-bench-fleet-") as tmp:
        folders = nodes.data_folders(Path(tmp), replicas, token)
        ports = [_free_port() for _ in folders]
        procs = [nodes.serve(d, p, store=store, durability=durability) for d, p in zip(folders, ports, strict=True)]
        targets = [f"127.0.0.1:{p}" for p in ports]
        try:
            try:
                request = _request(_start_run(targets[0], token, procs[0]))
                for target, proc in zip(targets, procs, strict=True):
                    _wait_ready(target, request, token, proc)
            except Exception as exc:
                raise RuntimeError(f"a checkpoint did not start: {exc}\n{nodes.serve_log(folders[0])}") from exc
            cpu = sum(_cpu_seconds(p.pid) for p in procs)
            figures = asyncio.run(_load(targets, request, token, args.concurrency,
                                        seconds=args.seconds, calls=args.calls))
            # the checkpoints' own CPU per answer: what a decision costs them, whatever else the box runs
            figures["cpu"] = (sum(_cpu_seconds(p.pid) for p in procs) - cpu) / figures["answers"] * 1e6
        finally:
            nodes.stop(procs)
        ok, records = _records(store, folders[0])
    if admin:
        nodes.drop_database(admin, name)
    if not ok or records < figures["answers"]:
        raise RuntimeError(f"record before answer broken: {figures['answers']} answers, {records} records, "
                           f"chain {'holds' if ok else 'broken'}")
    return figures


def write_cost(admin: str | None, records: int) -> dict[str, float]:
    """Microseconds per record, one writer appending one record at a time."""
    from checkpoint.audit import DecisionLog

    def timed(log: Any) -> float:
        for _ in range(20):
            log.append(RECORD)
        t0 = time.perf_counter()
        for _ in range(records):
            log.append(RECORD)
        return (time.perf_counter() - t0) / records * 1e6

    costs = {}
    with tempfile.TemporaryDirectory(prefix="warden-bench-fleet-") as tmp:
        for synchronous in ("NORMAL", "FULL"):
            log = DecisionLog(Path(tmp) / f"{synchronous}.db", synchronous=synchronous)  # type: ignore[arg-type]
            try:
                costs[f"SQLite {synchronous}"] = timed(log)
            finally:
                log.close()
    if admin:
        from checkpoint.audit.pg_log import PgDecisionLog
        from warden.store.pg import Database
        from warden.store.url import parse_store_url

        url = nodes.fresh_database(admin, "bench_fleet_write")
        with PgDecisionLog(Database(parse_store_url(url, default_folder="/unused"), name="bench").open(),
                           owns_db=True) as pg_log:
            costs["PostgreSQL"] = timed(pg_log)
        nodes.drop_database(admin, "bench_fleet_write")
    return costs


def _spread(values: list[float]) -> str:
    mean = sum(values) / len(values)
    return f"{(max(values) - min(values)) / mean:.0%}" if mean else "-"


def _joined(values: list[float]) -> str:
    return " / ".join(f"{v:,.0f}" for v in values)


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    print(f"\n{'checkpoints':<26} {'decisions/s per run':>22} {'spread':>6} {'p50 us per run':>18} {'spread':>6}"
          f" {'p99 us per run':>18} {'spread':>6} {'CPU us/decision':>16}")
    for label, runs in results.items():
        rps, p50, p99, cpu = ([r[k] for r in runs] for k in ("rps", "p50", "p99", "cpu"))
        print(f"{label:<26} {_joined(rps):>22} {_spread(rps):>6} {_joined(p50):>18} {_spread(p50):>6}"
              f" {_joined(p99):>18} {_spread(p99):>6} {_joined(cpu):>16}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", default="1,2,4", help="replica counts on PostgreSQL (default 1,2,4)")
    parser.add_argument("--sqlite", default="NORMAL,FULL", help="durabilities of the SQLite checkpoint; '' for none")
    parser.add_argument("--seconds", type=float, default=5.0, help="at most this long a measurement (default 5)")
    parser.add_argument("--calls", type=int, default=100_000, help="at most this many calls a measurement")
    parser.add_argument("--concurrency", type=int, default=32, help="calls in flight over all replicas (default 32)")
    parser.add_argument("--runs", type=int, default=2, help="measurements of each configuration (default 2)")
    parser.add_argument("--records", type=int, default=1000, help="records appended for the write cost (default 1000)")
    parser.add_argument("--store", help="an admin URL of a PostgreSQL whose databases this may create and drop")
    # called as main([]) by `python -m bench`, whose own argv is not ours
    args = parser.parse_args(argv if argv is not None else [])
    configs = [(f"SQLite, --durability {d}", 0, d) for d in args.sqlite.split(",") if d]
    configs += [(f"PostgreSQL, {n} replica{'s' if n > 1 else ''}", int(n), "NORMAL")
                for n in (int(x) for x in args.replicas.split(",") if x)]
    server, admin = (None, args.store) if args.store else nodes.durable_cluster()
    try:
        print(f"Check() over gRPC on loopback, {args.concurrency} calls in flight, at most {args.seconds:g} s or "
              f"{args.calls:,} calls a measurement, {args.runs} runs; PostgreSQL {'given' if args.store else 'throwaway, durable commits'}; "
              f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in configs}
        for run in range(args.runs):  # round-robin: drift in the machine's load falls on every configuration
            for label, replicas, durability in configs:
                figures = measure(max(replicas, 1), admin=admin if replicas else None, durability=durability,
                                  run=run, args=args)
                results[label].append(figures)
                print(f"run {run + 1}: {label:<26} {figures['rps']:>7,.0f} decisions/s, p50 {figures['p50']:,.0f} us,"
                      f" p99 {figures['p99']:,.0f} us, checkpoint CPU {figures['cpu']:,.0f} us/decision"
                      f" ({figures['answers']:,} answers, each recorded)", flush=True)
        report(results)
        costs = write_cost(admin, args.records)
        print(f"\none decision's write, one writer, {args.records:,} records one commit each: "
              + ", ".join(f"{k} {v:,.0f} us" for k, v in costs.items()))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
