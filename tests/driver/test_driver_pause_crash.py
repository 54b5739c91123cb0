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

from driver.runs.model import AWAITING_APPROVAL, PAUSED
from driver.runs.sqlite import SqliteRunStore

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


def _paused_events(store: SqliteRunStore, run_id: str) -> list[str]:
    return [e.data["code"] for e in store.events(run_id) if e.kind == "run_paused"]


@pytest.mark.usefixtures("triage_waits")
@pytest.mark.parametrize("point", ["before:parent", "after:parent", "before:child", "after:child", "returned"])
def test_a_pause_survives_a_driver_killed_at_any_point_and_applies_once(stack, checkpoint_server, point):
    d = stack.driver()
    parent_id = start_parent(d, [], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    child_id = child.run_id
    until(d, child_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
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
        store = SqliteRunStore(stack.db)
        try:
            parent, child = store.run(parent_id), store.run(child_id)
            assert (parent.status, parent.code) == (PAUSED, "paused"), point
            assert (child.status, child.code) == (PAUSED, "parent_paused"), point
            assert _paused_events(store, parent_id) == ["paused"]
            assert _paused_events(store, child_id) == ["parent_paused"]
            assert not store.open_pauses()
        finally:
            store.close()
        for run_id in (parent_id, child_id):
            assert [r["arguments"]["person"] for r in acts(checkpoint_server, run_id, "pause")] == ["bob"], point
    finally:
        _kill(recovering)


@pytest.mark.usefixtures("triage_waits")
def test_a_pause_whose_answer_was_lost_is_finished_once_when_asked_again_or_on_restart(stack, checkpoint_server):
    """The checkpoint cannot be reached while a person pauses: it may have recorded the act
    before the answer was lost, so the pause stays open; asked again, it is sent under the same
    id and applied once, and a driver that restarts first applies it the same way."""
    from driver.errors import DependencyUnavailable

    d = stack.driver()
    parent_id = start_parent(d, [], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    for finish in ("asked_again", "restart"):
        if finish == "restart":
            d.resume_with_children(parent_id, "bob")
            until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval again")
        cut_off = stack.driver(checkpoint="127.0.0.1:1")  # nothing listens there
        with pytest.raises(DependencyUnavailable):
            cut_off.pause(parent_id, "bob", "hold everything")
        assert d.store.run(parent_id).status != PAUSED and len(d.store.open_pauses()) == 1
        again = stack.driver()
        if finish == "asked_again":
            again.pause(parent_id, "bob", "hold everything")
        else:
            again.recover()
        for run_id, code in ((parent_id, "paused"), (child.run_id, "parent_paused")):
            run = again.store.run(run_id)
            assert (run.status, run.code) == (PAUSED, code), finish
        assert not again.store.open_pauses()
    for run_id in (parent_id, child.run_id):
        assert len(acts(checkpoint_server, run_id, "pause")) == 2  # one per pause, none twice
        assert _paused_events(d.store, run_id) == [
            "paused" if run_id == parent_id else "parent_paused"] * 2
