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
