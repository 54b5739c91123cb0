"""`warden store copy` of a driver's runs: a `driver.db` of `--runs-in-file` runs and `--events`
events in all (written by the real SQLite run store), plus a `limits.db` of `--counts` counts, copied
into a freshly migrated PostgreSQL database, `--repeat` times (each into a database of its own).

Reported per repeat: the time of the whole `copy_folder` (checking the files, then one transaction
writing every row) and rows/s. The cluster is tests/pgserver.py's throwaway one with durable commits
on (one commit per copy, so this hardly matters).

    .venv/bin/python bench/bench_store_copy.py [--runs-in-file 200] [--events 50000] [--counts 5000]
        [--repeat 2] [--store postgresql://admin-url]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_log_pg import _throwaway_server  # noqa: E402


def _make_folder(folder: Path, runs: int, events: int, counts: int) -> None:
    from checkpoint.server.limit_store import Bucket, Increment, SqliteLimits
    from driver.runs.model import EventKind
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(folder / "driver.db")
    store.db.execute("PRAGMA synchronous=OFF")  # the file is made once, quickly; the copy is what is timed
    try:
        for n in range(runs):
            store.create_run(run_id=f"run-{n}", agent="recon", agent_version="v1", tenant="acme", owner="alice")
            store.add_goal(f"run-{n}", {"text": f"goal {n}"}, "alice")
            store.add_call(f"run-{n}", 1, 0, call_id="t1", tool="refund", arguments={"order": n}, args_sha="s",
                           plan_step="")
        for k in range(events):
            store.append_event(f"run-{k % runs}", EventKind.NUDGED, step=k, note="a step of the run's work")
    finally:
        store.close()
    limits = SqliteLimits(folder / "limits.db")
    try:
        for k in range(counts):
            limits.count([Increment(Bucket("calls", f"principal:p{k}", 1000), 1, 10, 1060)], now=1000)
    finally:
        limits.close()


def _fresh_database(admin_url: str, name: str) -> str:
    import psycopg

    from warden.store.migrations import migrate
    from warden.store.pg import Database
    from warden.store.url import parse_store_url
    from warden.store_cli import schemas

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    with Database(parse_store_url(url, default_folder="/unused"), name="bench").open() as db:
        for schema in schemas():
            migrate(db, schema)
    return url


def main(argv: list[str] | None = None) -> int:
    from checkpoint.server.limit_copy import COPY as LIMITS_COPY
    from driver.runs.copy import COPY as RUNS_COPY
    from warden.store.copy import copy_folder
    from warden.store.pg import Database
    from warden.store.url import parse_store_url

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs-in-file", type=int, default=200)
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--counts", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--store", help="an admin URL of a PostgreSQL whose databases this may create and drop")
    args = parser.parse_args(argv)
    server, admin = (None, args.store) if args.store else _throwaway_server()
    try:
        with tempfile.TemporaryDirectory(prefix="bench-copy-") as tmp:
            folder = Path(tmp)
            started = time.perf_counter()
            _make_folder(folder, args.runs_in_file, args.events, args.counts)
            print(f"driver.db: {args.runs_in_file} runs, {args.events} events "
                  f"({(folder / 'driver.db').stat().st_size / 1e6:.1f} MB); limits.db: {args.counts} counts; "
                  f"made in {time.perf_counter() - started:.1f} s; {os.cpu_count()} CPUs, load average "
                  f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
            for n in range(args.repeat):
                url = _fresh_database(admin, f"bench_copy_{n}")
                with Database(parse_store_url(url, default_folder="/unused"), name="bench", max_size=1,
                              statement_timeout=600) as db:
                    started = time.perf_counter()
                    rows = copy_folder(folder, db, [LIMITS_COPY, RUNS_COPY], io.StringIO())
                    seconds = time.perf_counter() - started
                print(f"copy {n + 1}: {rows} rows in {seconds:.2f} s ({rows / seconds:.0f} rows/s)", flush=True)
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
