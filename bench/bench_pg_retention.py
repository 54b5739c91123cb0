"""Retention of the decision log on PostgreSQL: exporting and sealing closed partitions
(`warden audit rotate --store`), then removing them by dropping whole partitions
(`warden audit prune --store`), against removing the same records with DELETE and VACUUM.

    .venv/bin/python -m bench pg_retention      (or: python bench/bench_pg_retention.py
        [--records 200000] [--partition 50000] [--runs 2] [--store postgresql://admin-url])

The records are tool calls as the checkpoint records them, chained and loaded with COPY (loading is
not measured). Durable commits (fsync on), as a decision log runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_log_pg import _throwaway_server  # noqa: E402
from bench.bench_retention import record  # noqa: E402


def _database(admin_url: str, name: str) -> str:
    import psycopg

    from checkpoint.audit.pg_schema import SCHEMA
    from warden.store.migrations import migrate

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    with _db(url) as db:
        migrate(db, SCHEMA)
    return url


def _db(url: str) -> Any:
    from warden.store.pg import Database
    from warden.store.url import parse_store_url

    # a long statement timeout: the DELETE and VACUUM measured here take longer than a Check's
    return Database(parse_store_url(url, default_folder="/unused"), name="bench", statement_timeout=600).open()


def load(url: str, records: int, size: int) -> None:
    """records + 1 chained records (the last in a partition of its own, holding the head)."""
    import psycopg

    from checkpoint.audit.pg_query import SELECT_COLUMNS
    from checkpoint.audit.pg_schema import TABLE, create_partition_sql, partition_of
    from checkpoint.audit.record import GENESIS_HASH, record_hash, to_row

    prev = GENESIS_HASH
    with psycopg.connect(url, autocommit=True) as conn:
        for number in range(partition_of(records + 1, size) + 1):
            conn.execute(create_partition_sql(number, size).encode())
        with conn.cursor().copy(f"COPY {TABLE} ({SELECT_COLUMNS}) FROM STDIN".encode()) as copy:
            for seq in range(1, records + 2):
                values = to_row({**record(seq), "decision_id": str(uuid.uuid4())})
                digest = record_hash(prev, (seq, *values))
                copy.write_row((seq, *values, prev, digest))
                prev = digest
        conn.execute(f"ANALYZE {TABLE}")


def measure(admin: str, records: int, size: int, run: int) -> dict[str, float]:
    from checkpoint.audit.heads import load_or_create_key
    from checkpoint.audit.pg_retention import prune, rotate
    from checkpoint.audit.pg_schema import TABLE
    from checkpoint.audit.record import now

    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-pgret-") as tmp:
        key = load_or_create_key(Path(tmp) / "audit-head.key")
        url = _database(admin, f"bench_pgret_{run}")
        load(url, records, size)
        with _db(url) as db:
            t0 = time.perf_counter()
            seals = rotate(db, Path(tmp) / "archive", key)
            figures["rotate"] = time.perf_counter() - t0
            assert sum(s.records for s in seals) == records, seals
            figures["archive_mb"] = sum(
                p.stat().st_size for p in (Path(tmp) / "archive" / "decisions.d").glob("segment-*.db")) / 1e6
            wal = _wal(db)
            t0 = time.perf_counter()
            removed = prune(db, key, before_time=now())
            figures["drop"] = time.perf_counter() - t0
            figures["drop_wal_mb"] = (_wal(db) - wal) / 1e6
            assert len(removed) == len(seals)
            t0 = time.perf_counter()
            report = _verify(db, key)
            assert report.ok and report.start_seq == records, report
            figures["verify_after"] = time.perf_counter() - t0
        # the same records removed row by row, on a database of its own
        url = _database(admin, f"bench_pgret_delete_{run}")
        load(url, records, size)
        with _db(url) as db, db.connection() as conn:
            wal = _wal(db)
            t0 = time.perf_counter()
            conn.execute(f"DELETE FROM {TABLE} WHERE seq <= %s", (records,))
            figures["delete"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            conn.execute(f"VACUUM {TABLE}")
            figures["vacuum"] = time.perf_counter() - t0
            figures["delete_wal_mb"] = (_wal(db) - wal) / 1e6
    return figures


def _wal(db: Any) -> int:
    """Bytes of WAL written so far: what a replica of the database, and its backups, must carry."""
    with db.connection() as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def _verify(db: Any, key: Any) -> Any:
    from checkpoint.audit.pg_reader import PgDecisionReader

    return PgDecisionReader(db).verify(public_key=key.public_key())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partition", type=int, default=50_000, help="records per partition (default 50000)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--store", help="an admin URL of a PostgreSQL whose databases this may create and drop")
    args = parser.parse_args(argv)
    server, admin = (None, args.store) if args.store else _throwaway_server()
    try:
        print(f"decision log retention on PostgreSQL: {args.records} records in partitions of {args.partition}; "
              f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'run':>3} {'rotate s':>9} {'rec/s':>8} {'archive MB':>11} {'drop s':>7} {'DELETE s':>9} "
              f"{'VACUUM s':>9} {'WAL MB drop':>11} {'WAL MB delete':>13} {'verify s':>9}")
        for run in range(args.runs):
            f = measure(admin, args.records, args.partition, run)
            print(f"{run + 1:>3} {f['rotate']:>9.2f} {args.records / f['rotate']:>8.0f} {f['archive_mb']:>11.1f} "
                  f"{f['drop']:>7.3f} {f['delete']:>9.2f} {f['vacuum']:>9.2f} {f['drop_wal_mb']:>11.2f} {f['delete_wal_mb']:>13.1f} {f['verify_after']:>9.3f}", flush=True)
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
