"""One decision log file, several writer processes (`serve --workers N`): every record lands once,
in one chain that verifies, even when the processes create the file together."""

from __future__ import annotations

import multiprocessing
import threading
import time

from checkpoint.audit import DecisionLog

PROCESSES, THREADS, EACH = 4, 4, 50


def _append(path: str, start_at: float, name: str) -> None:
    while time.time() < start_at:  # every process opens a file that does not exist yet, together
        time.sleep(0.001)
    log = DecisionLog(path, shared=True)

    def run(t: int) -> None:
        for i in range(EACH):
            log.append({"action": "tool_call", "verdict": "ALLOW", "code": "allowed", "tool": f"{name}-{t}-{i}"})

    threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()


def test_processes_creating_and_appending_to_one_log_leave_one_whole_chain(tmp_path):
    path = tmp_path / "decisions.db"
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters, as separate workers are
    start_at = time.time() + 3.0
    procs = [ctx.Process(target=_append, args=(str(path), start_at, f"p{n}")) for n in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    log = DecisionLog(path)
    try:
        assert log.verify().ok
        tools = [r["tool"] for r in log.read()]
    finally:
        log.close()
    expected = {f"p{n}-{t}-{i}" for n in range(PROCESSES) for t in range(THREADS) for i in range(EACH)}
    assert len(tools) == len(expected) and set(tools) == expected


def test_a_worker_stuck_holding_the_write_lock_denies_within_the_append_timeout(tmp_path):
    """A worker stopped while it holds `decisions.db.write-lock` (SIGSTOP, a debugger, a frozen disk):
    the others must deny within the append timeout, as a single checkpoint does when SQLite's lock is
    held (busy timeout), not wait for ever. The lone caller that writes its own record (no batch in
    flight) blocked on the lock with no bound; every caller behind it timed out."""
    import fcntl
    import os

    from checkpoint.audit.errors import AuditUnavailable

    path = tmp_path / "decisions.db"
    log = DecisionLog(path, shared=True, append_timeout=0.5)
    log.append({"action": "tool_call", "verdict": "ALLOW", "code": "allowed"})
    stuck = os.open(f"{path}.write-lock", os.O_RDWR)  # the other worker, as another open file
    fcntl.flock(stuck, fcntl.LOCK_EX)
    outcome: list[object] = []

    def lone_caller() -> None:
        try:
            outcome.append(log.append({"action": "tool_call", "verdict": "ALLOW", "code": "allowed"}))
        except AuditUnavailable as exc:
            outcome.append(exc)

    caller = threading.Thread(target=lone_caller, daemon=True)
    caller.start()
    caller.join(timeout=60)  # far beyond the 0.5 s asked for: a bound, not a timing
    stuck_for_ever = caller.is_alive()
    os.close(stuck)  # the stuck worker goes on: what was queued is written
    caller.join(timeout=60)
    assert not stuck_for_ever, "the lone caller waited on the other worker's lock with no bound"
    assert isinstance(outcome[0], AuditUnavailable), outcome
    log.close()
    assert log.verify().ok
