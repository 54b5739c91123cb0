"""A driver killed (SIGKILL) anywhere in a person's pause of a parent and its child: after a
restart the pause holds both runs, each pause on the checkpoint's record once and applied once.

The driver runs in a process of its own (driver_process.py) with the real checkpoint client,
which stops at the named point (before an act is sent, or after the checkpoint recorded it and
answered); the test waits for that line, kills the process, and starts another on the same store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from driver_harness import CHECKPOINT_TOKEN, TOOLRUNNER_TOKEN
from test_driver_pause import TRIAGE_PLAN, acts, start_parent, triage_waits, until  # noqa: F401 - a fixture

from driver.store import AWAITING_APPROVAL, PAUSED, RunStore

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("driver_process.py")


def _driver(stack: Any, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WARDEN_TEST_CHECKPOINT_TOKEN": CHECKPOINT_TOKEN,
           "WARDEN_TEST_TOOLRUNNER_TOKEN": TOOLRUNNER_TOKEN}
    return subprocess.Popen([sys.executable, str(HELPER), args[0], str(stack.db), str(stack.policy_dir),
                             stack.checkpoint_address, stack.toolrunner_address, *args[1:]],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _until_line(proc: subprocess.Popen[str], wanted: str) -> None:
    """Read the process's lines until `wanted`; a process that ends first fails the test."""
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == wanted:
            return
    raise AssertionError(f"the driver process ended (exit {proc.wait(30)}) before {wanted!r}")


def _kill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)


def _paused_events(store: RunStore, run_id: str) -> list[str]:
    return [e["data"]["code"] for e in store.events(run_id) if e["kind"] == "run_paused"]


@pytest.mark.usefixtures("triage_waits")
@pytest.mark.parametrize("point", ["before:parent", "after:parent", "before:child", "after:child", "returned"])
def test_a_pause_survives_a_driver_killed_at_any_point_and_applies_once(stack, checkpoint_server, point):
    d = stack.driver()
    parent_id = start_parent(d, [], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    child_id = child["run_id"]
    until(d, child_id, lambda r: r["status"] == AWAITING_APPROVAL, "waited for approval")
    d.stop()
    stop_at = point.replace("parent", parent_id).replace("child", child_id)

    pausing = _driver(stack, "pause", parent_id, stop_at)
    try:
        _until_line(pausing, f"at {stop_at}")
    finally:
        _kill(pausing)
    recovering = _driver(stack, "recover")
    try:
        _until_line(recovering, "recovered")
        store = RunStore(stack.db)
        try:
            parent, child = store.run(parent_id), store.run(child_id)
            assert (parent["status"], parent["code"]) == (PAUSED, "paused"), point
            assert (child["status"], child["code"]) == (PAUSED, "parent_paused"), point
            assert _paused_events(store, parent_id) == ["paused"]
            assert _paused_events(store, child_id) == ["parent_paused"]
            assert not store.open_pauses()
        finally:
            store.close()
        for run_id in (parent_id, child_id):
            assert [r["arguments"]["person"] for r in acts(checkpoint_server, run_id, "pause")] == ["bob"], point
    finally:
        _kill(recovering)
