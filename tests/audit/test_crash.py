"""SIGKILL under load: every seq the process was told is committed survives, the chain verifies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog, DecisionReader

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys, threading
    from checkpoint.audit import DecisionLog

    log = DecisionLog(sys.argv[1])
    out = threading.Lock()

    def worker(t):
        i = 0
        while True:
            i += 1
            decision_id = f"t{t}-{i}"
            seq = log.append({"decision_id": decision_id, "action": "tool_call", "tool": "refund",
                              "arguments": {"i": i}, "verdict": "ALLOW", "code": "allowed"})
            with out:  # printed only after append returned: the record is committed
                sys.stdout.write(f"{seq} {decision_id}\\n")
                sys.stdout.flush()

    for t in range(8):
        threading.Thread(target=worker, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("round_", range(3))
def test_sigkill_loses_no_committed_record(tmp_path, round_):
    path = tmp_path / "decisions.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, env=env, cwd=REPO
    )
    assert child.stdout is not None
    printed: dict[int, str] = {}
    try:
        while len(printed) < 1500 + 700 * round_:
            line = child.stdout.readline()
            assert line, "the child stopped before it was killed"
            seq, decision_id = line.decode().split()
            printed[int(seq)] = decision_id
    finally:
        os.kill(child.pid, signal.SIGKILL)
        rest = child.stdout.read()
        child.wait()
    for line in rest.decode().splitlines(keepends=True):
        if line.endswith("\n"):  # a half-written last line was cut by the kill
            seq, decision_id = line.split()
            printed[int(seq)] = decision_id
    assert child.returncode == -signal.SIGKILL

    # Read it the way an operator would right after the crash, before anything reopens it.
    report = DecisionReader(path).verify()
    assert report.ok, report.summary()
    stored = {r["seq"]: r["decision_id"] for r in DecisionReader(path).read()}
    missing = {seq: d for seq, d in printed.items() if stored.get(seq) != d}
    assert not missing
    assert report.checked >= max(printed)

    with DecisionLog(path) as reopened:  # and the chain goes on from where it stopped
        seq = reopened.append({"action": "plan", "verdict": "DENY", "code": "plan_step_not_allowed"})
        assert seq == report.checked + 1
        assert reopened.verify().ok
