"""The parts `python -m bench fleet` stands up: a throwaway PostgreSQL with durable commits, a fresh
migrated database per measurement, data folders for replicas that share one grant key and one set
of token keys, and real `warden checkpoint serve` processes on loopback ports."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def durable_cluster() -> tuple[Any, str]:
    """A cluster like the tests' (tests/pgserver.py) with fsync, synchronous_commit and
    full_page_writes on: a decision committed is on disk, which is what record-before-answer costs."""
    import psycopg

    from tests.pgserver import PASSWORD, PgServer, binaries

    bindir = binaries()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries here (apt-get install postgresql), and no --store given")
    server = PgServer(bindir)
    os.environ["PGPASSWORD"] = PASSWORD  # the replicas and `warden store migrate` find it as libpq does
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            for setting in ("fsync", "synchronous_commit", "full_page_writes"):
                conn.execute(f"ALTER SYSTEM SET {setting} = on".encode())
            conn.execute("SELECT pg_reload_conf()")
            shown = {s: (conn.execute(f"SHOW {s}".encode()).fetchone() or ("?",))[0] for s in ("fsync", "synchronous_commit")}
    except BaseException:
        server.close()
        raise
    if set(shown.values()) != {"on"}:
        server.close()
        raise RuntimeError(f"the cluster did not turn durability on: {shown}")
    return server, server.url()


def fresh_database(admin_url: str, name: str) -> str:
    """An empty database named `name` (dropped first if a run before left it), migrated by the
    command an operator runs: `warden store migrate`."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    url = admin_url.rsplit("/", 1)[0] + "/" + name
    subprocess.run([sys.executable, "-m", "warden.cli", "store", "migrate", "--store", url],
                   cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=120)
    return url


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def data_folders(parent: Path, count: int, token: str) -> list[Path]:
    """`count` data folders holding the same grant key, caller token and token keys, so a run token
    one replica signed verifies at every other (docs/fleet.md, "Checkpoint replicas")."""
    from warden.token_keys import FOLDER, ensure

    first = parent / "data-0"
    subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(first)],
                   cwd=ROOT, env=_env(), check=True, capture_output=True, timeout=120)
    (first / "checkpoint.tokens").write_text(f"driver {token}\n")  # the shipped `driver` principal
    ensure(first / FOLDER)
    folders = [first]
    for i in range(1, count):
        folders.append(Path(shutil.copytree(first, parent / f"data-{i}")))
    return folders


def serve(data: Path, port: int, *, store: str | None, durability: str = "NORMAL") -> subprocess.Popen:
    """One checkpoint, as an operator starts it; hot reload off and no CPU pinning, so that where it
    runs is the scheduler's business on a shared box, as it is for every other bench."""
    command = [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data),
               "--policies", str(ROOT / "policies"), "--address", f"127.0.0.1:{port}", "--socket", "",
               "--reload-interval", "0", "--pin-cpus", "off", "--durability", durability]
    if store:
        command += ["--store", store]
    log = open(data / "serve.log", "wb")  # noqa: SIM115 - the process writes it for its whole life
    try:
        return subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    finally:
        log.close()


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each (a clean drain: its last records committed, its head signed), then wait."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + 30
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def serve_log(data: Path) -> str:
    path = data / "serve.log"
    return path.read_text(errors="replace")[-2000:] if path.exists() else ""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}
