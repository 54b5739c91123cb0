"""`warden up --store URL`: the one store given to all three real processes. With `--migrate` on a
fresh PostgreSQL (tests/pgserver.py) a scripted run's Checks land in the PostgreSQL decision log and
the run in the driver's PostgreSQL tables, and no process writes its SQLite files; without the
schema, or with a URL that cannot be used, nothing starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import yaml
from driver_harness import PLAN, call

from warden.up import free_port

ROOT = Path(__file__).resolve().parents[2]


def _up(tmp_path: Path, policy_dir: Path, *flags: str) -> subprocess.Popen[str]:
    ports = f"{free_port()},{free_port()},{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_STORE")}
    return subprocess.Popen([sys.executable, "-m", "warden.cli", "up", "--data", str(tmp_path / "data"),
                             "--policies", str(policy_dir), "--ports", ports, "--provider", "scripted",
                             "--grace", "2", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _wait_ready(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[list[str], str]:
    """The lines `warden up` printed up to `ready.`, and the driver's address it names."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip())
        if line.startswith("ready."):
            return lines, line.split("driver on ", 1)[1].split(";", 1)[0]
    proc.kill()
    raise AssertionError("warden up was not ready:\n" + "\n".join(lines) + (proc.stderr.read() if proc.stderr else ""))


def test_up_with_a_postgresql_store_keeps_the_log_and_the_runs_there(pg_url, tmp_path, policy_dir, tool_images):
    proc = _up(tmp_path, policy_dir, "--store", pg_url, "--migrate")
    try:
        lines, driver = _wait_ready(proc)
        assert any(line.startswith("runs ") and "version" in line for line in lines), lines  # migrated first
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"responses": [
            PLAN, call("get_task", task_id="task-abc123"), {"action": "handoff", "reason": "read it"}]}))
        env = {**os.environ, "WARDEN_DRIVER": driver, "WARDEN_DATA": str(tmp_path / "data")}
        out = subprocess.run([sys.executable, "-m", "warden.cli", "run", "recon", "--goal",
                              str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script), "--follow"],
                             capture_output=True, text=True, env=env, cwd=ROOT, timeout=180)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "receipt get_task: exit 0" in out.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0

    with psycopg.connect(pg_url) as conn:
        [(run_id, status)] = conn.execute("SELECT run_id, status FROM driver_runs").fetchall()
        checks = conn.execute("SELECT tool, verdict FROM audit_decisions WHERE run_id = %s AND action = 'tool_call' "
                              "ORDER BY seq", (run_id,)).fetchall()
        events = conn.execute("SELECT count(*) FROM driver_events WHERE run_id = %s", (run_id,)).fetchone()[0]
        receipts = conn.execute("SELECT count(*) FROM toolrunner_receipts WHERE run_id = %s", (run_id,)).fetchone()[0]
    assert ("get_task", "ALLOW") in checks and events > 0 and receipts == 1 and status
    data = tmp_path / "data"
    # each process kept its state in the store, none in a SQLite file of its folder
    for name in ("checkpoint/decisions.db", "driver/driver.db", "toolrunner/toolrunner.db"):
        assert not (data / name).exists(), name


def test_up_on_a_store_without_its_schema_starts_nothing(pg_url, tmp_path, policy_dir, tool_images):
    proc = _up(tmp_path, policy_dir, "--store", pg_url)  # no --migrate
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, out + err
    assert "checkpoint did not start" in err and "warden store migrate" in err, err
    with psycopg.connect(pg_url) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()[0]
    assert tables == 0  # the store was left as it was found


def test_up_with_a_store_url_that_cannot_be_used_starts_nothing(tmp_path, policy_dir):
    proc = _up(tmp_path, policy_dir, "--store", "mysql://db/warden")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "store_url_invalid" in err, out + err
    assert not (tmp_path / "data").exists()
