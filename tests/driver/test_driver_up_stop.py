"""`warden up` stopping its children: each gets the drain it was given (--grace) and time to close
its log before it is killed; one that ignores SIGTERM is killed, not waited for forever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from warden.cli import build_parser
from warden.up import Child, Stack

# exits on its own a while after SIGTERM, like a server draining a long call and closing its log
SLOW_TO_STOP = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: (time.sleep({delay}), sys.exit(0)))
print("ready", flush=True)
time.sleep(120)
"""
IGNORES_SIGTERM = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(120)
"""


def _child(tmp_path: Path, name: str, code: str) -> Child:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"  # its handler is in place
    return Child(name, "127.0.0.1:0", [], tmp_path / f"{name}.log", proc)


def test_a_child_draining_within_its_grace_is_not_killed(tmp_path):
    """11 s to stop, with --grace 8: it gets 8 s + the margin (the old fixed 10 s killed it)."""
    stack = Stack(tmp_path, tmp_path, grace=8)
    stack.children = [_child(tmp_path, "checkpoint", SLOW_TO_STOP.format(delay=11))]
    stack.stop()
    assert stack.children[0].proc.returncode == 0


def test_a_child_that_ignores_sigterm_is_killed_after_grace_and_margin(tmp_path):
    stack = Stack(tmp_path, tmp_path, grace=0)
    stack.children = [_child(tmp_path, "driver", IGNORES_SIGTERM)]
    stack.stop()
    assert stack.children[0].proc.returncode == -9


def test_up_passes_its_grace_on_and_defaults_to_ten_seconds():
    parser = build_parser()
    assert parser.parse_args(["up"]).grace == 10
    assert parser.parse_args(["up", "--grace", "2.5"]).grace == 2.5
