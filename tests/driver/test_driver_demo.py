"""`make demo` is how a newcomer first meets warden: the whole scenario must keep passing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_plays_every_step_of_its_scenario(tmp_path: Path, tool_images: None) -> None:
    env = {**os.environ, "WARDEN_DEMO_DATA": str(tmp_path / "demo"), "WARDEN_DEMO_SKIP_DOCKER": "1"}
    done = subprocess.run([sys.executable, "-m", "demo"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = next(line for line in done.stdout.splitlines() if "decisions recorded; scenario:" in line)
    for step in ("plan read and approved before the run went on", "allowed call ran in a container", "denied call",
                 "approval", "breaker trip and pause", "resume",
                 "an agent's proposal approved into a new version while the run kept its own",
                 "a pause that paused a child, which resumed with its parent", "delegation to a child run",
                 "verified success of the task it started", "the breaker's learning promoted by an admin",
                 "per-version statistics of recon's two versions"):
        assert f"{step} ok" in summary
    assert "MISSING" not in summary
    stream = done.stdout.split("the decision stream", 1)[1]
    assert "delegation to triage" in stream
    assert "triage@" in stream  # the child's decisions, in the same stream as its parent's
    assert "catalog" in stream and "proposed" in stream  # the agent's proposal, under its run
    assert stream.count(" pause ") >= 2  # the parent's pause and its child's, each on the record
