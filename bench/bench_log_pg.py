"""One decision log for a fleet on PostgreSQL: one global chain against one chain per writer.

Each of 1, 2 and 4 writer processes (as checkpoint replicas are) runs `--threads` appending threads
for `--seconds`, on one PostgreSQL with durable commits (fsync and synchronous_commit on), every
record committed before append returns, group commit in each process (checkpoint/audit/pg_log.py):

- one global chain: each transaction takes the chain's advisory lock, reads the head and links its
  records to it (what the checkpoint does);
- a chain per writer: each process links to its own head, kept in memory, and inserts rows with
  its writer id (PRIMARY KEY (writer, seq)), with no lock between processes. This is the ceiling
  of that design's write side; its cost is on the read side (verify, query and follow merge N
  chains, and a signed head is N heads).

Every configuration runs `--runs` times, each on a fresh database; reported: decisions/s over all
processes (each run, and the spread: (max - min) / mean), p50 and p99 append latency of the last run.

    .venv/bin/python bench/bench_log_pg.py [--processes 1,2,4] [--threads 8] [--seconds 3] [--runs 2]
        [--store postgresql://...]   (default: a throwaway cluster of tests/pgserver.py)
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_audit import RECORD  # noqa: E402

GLOBAL, PER_WRITER = "one global chain", "chain per writer"
_PER_WRITER_TABLE = ("CREATE TABLE IF NOT EXISTS bench_writer_chains (writer integer NOT NULL, "
                     "LIKE audit_decisions, PRIMARY KEY (writer, seq))")


def _log(url: str, design: str, writer: int) -> Any:
    from checkpoint.audit.pg_log import PgDecisionLog
    from checkpoint.audit.pg_query import INSERT_SQL
    from checkpoint.audit.record import GENESIS_HASH, record_hash
    from warden.store.pg import Database
    from warden.store.url import parse_store_url

    db = Database(parse_store_url(url, default_folder="/unused"), name=f"bench-{writer}", max_size=2).open()
    if design == GLOBAL:
        return PgDecisionLog(db, owns_db=True)

    insert = INSERT_SQL.replace("audit_decisions (", "bench_writer_chains (writer, ").replace("VALUES (", "VALUES (%s, ")

    class PerWriterLog(PgDecisionLog):
        head_seq, head_hash = 0, GENESIS_HASH

        def chain_rows(self, conn: Any, batch: list[tuple[Any, ...]]) -> tuple[int, int]:
            seq, prev = self.head_seq, self.head_hash
            first, rows = seq + 1, []
            for values in batch:
                seq += 1
                digest = record_hash(prev, (seq, *values))
                rows.append((writer, seq, *values, prev, digest))
                prev = digest
            with conn.pipeline(), conn.cursor() as cursor:  # one round trip: no lock, no head to read
                conn.execute("BEGIN")
                cursor.executemany(insert.encode(), rows)
                conn.execute("COMMIT")
            # kept only once committed; a failed batch is retried from the old head
            self._next = (seq, prev)
            return seq, first

        def _commit(self, batch: list[tuple[Any, ...]]) -> int:
            first = super()._commit(batch)
            self.head_seq, self.head_hash = self._next
            return first

    return PerWriterLog(db, owns_db=True)


def _writer(url: str, design: str, writer: int, threads: int, seconds: float, start_at: float,
            out: multiprocessing.Queue) -> None:
    log = _log(url, design, writer)
    for _ in range(20):
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


def measure(url: str, design: str, processes: int, threads: int, seconds: float) -> dict[str, float]:
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each: no pool threads forked
    out: multiprocessing.Queue = ctx.Queue()
    start_at = time.time() + 3.0 + 0.5 * processes  # every process opened its pool before the clock starts
    procs = [ctx.Process(target=_writer, args=(url, design, i, threads, seconds, start_at, out))
             for i in range(processes)]
    for p in procs:
        p.start()
    lat = sorted(x for _ in procs for x in out.get(timeout=seconds + 120))
    for p in procs:
        p.join()
    return {"rps": len(lat) / seconds, "p50": lat[len(lat) // 2], "p99": lat[int(len(lat) * 0.99)]}


def _fresh_database(admin_url: str, name: str) -> str:
    import psycopg

    from checkpoint.audit.pg_schema import SCHEMA
    from warden.store.migrations import migrate
    from warden.store.pg import Database
    from warden.store.url import parse_store_url

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    with Database(parse_store_url(url, default_folder="/unused"), name="bench").open() as db:
        migrate(db, SCHEMA)
        with db.connection() as conn:
            conn.execute(_PER_WRITER_TABLE)
    return url


def _throwaway_server() -> tuple[Any, str]:
    import psycopg

    from tests.pgserver import PASSWORD, PgServer, binaries

    bindir = binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries here (apt-get install postgresql), and no --store given")
    server = PgServer(bindir)
    os.environ["PGPASSWORD"] = PASSWORD
    # the test cluster turns durability off; a decision log is measured with it on
    with psycopg.connect(server.url(), autocommit=True) as conn:
        for setting in ("fsync", "synchronous_commit", "full_page_writes"):
            conn.execute(f"ALTER SYSTEM SET {setting} = on".encode())
        conn.execute("SELECT pg_reload_conf()")
    return server, server.url()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--threads", type=int, default=8, help="appending threads per process (default 8)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--store", help="an admin URL of a PostgreSQL whose databases this may create and drop")
    args = parser.parse_args(argv)
    server, admin = (None, args.store) if args.store else _throwaway_server()
    try:
        print(f"decision log on PostgreSQL, writer processes x {args.threads} threads, {args.seconds:.0f} s a run, "
              f"durable commits; {os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'design':<18} {'processes':>9} {'decisions/s per run':>22} {'spread':>7} {'p50 us':>8} {'p99 us':>8}")
        for n in (int(x) for x in args.processes.split(",")):
            for design in (GLOBAL, PER_WRITER):
                figures = []
                for run in range(args.runs):
                    url = _fresh_database(admin, f"bench_log_{n}_{run}")
                    figures.append(measure(url, design, n, args.threads, args.seconds))
                    if design == GLOBAL:
                        from warden.store.pg import Database
                        from warden.store.url import parse_store_url

                        with Database(parse_store_url(url, default_folder="/unused"), name="bench").open() as db:
                            from checkpoint.audit.pg_reader import PgDecisionReader

                            report = PgDecisionReader(db).verify()
                            assert report.ok, report  # the one chain took every process's records
                rates = [f["rps"] for f in figures]
                spread = (max(rates) - min(rates)) / (sum(rates) / len(rates))
                print(f"{design:<18} {n:>9} {' / '.join(f'{r:.0f}' for r in rates):>22} {spread:>6.0%} "
                      f"{figures[-1]['p50']:>8.0f} {figures[-1]['p99']:>8.0f}", flush=True)
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
