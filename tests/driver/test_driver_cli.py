"""`warden up` as a person uses it: three real processes, the CLI, a clean stop."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from driver_harness import PLAN, call

from warden.up import Stack, free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def up(tmp_path, policy_dir, tool_images):
    stack = Stack(tmp_path / "data", policy_dir, free_port(), free_port(), free_port())
    stack.start(timeout=90)
    yield stack
    stack.stop()


def warden(stack, *args):
    env = {**os.environ, "WARDEN_DRIVER": stack.driver_address, "WARDEN_DATA": str(stack.data),
           "WARDEN_CHECKPOINT": f"127.0.0.1:{stack.checkpoint_port}"}
    return subprocess.run([sys.executable, "-m", "warden.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def test_run_follow_approve_resume_from_the_cli_and_a_clean_stop(up, tmp_path):
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"responses": [
        PLAN, call("create_task_from_template", template="web", target="10.20.0.0/24"),
        {"action": "handoff", "reason": "need a person to read the result"}]}))
    out = warden(up, "run", "recon", "--goal", str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script),
                 "--follow")
    assert out.returncode == 0, out.stderr
    assert "REQUIRE_APPROVAL approval_required" in out.stdout
    approval_id = re.search(r"\bapr-[0-9a-f]+", out.stdout).group(0)
    run_id = re.search(r"\brun-[0-9a-f-]+", out.stdout).group(0)

    approved = warden(up, "approve", approval_id, "--note", "lab only")
    assert approved.returncode == 0, approved.stderr
    watched = warden(up, "watch", run_id)
    assert "receipt create_task_from_template: exit 0" in watched.stdout
    assert "run paused (handoff)" in watched.stdout

    shown = warden(up, "runs", run_id)
    assert "paused" in shown.stdout and "handoff" in shown.stdout
    again = warden(up, "approve", approval_id)
    assert again.returncode == 1 and "not pending" in again.stderr
    resumed = warden(up, "resume", run_id, "--raise", "turns_total=9")
    assert resumed.returncode != 0 and "not a ceiling" in resumed.stderr  # turns_total is never raised

    up.stop()
    assert [c.proc.returncode for c in up.children] == [0, 0, 0]  # each stopped cleanly on SIGTERM


def test_cli_without_credential_says_what_to_do(tmp_path):
    env = {**os.environ, "WARDEN_DATA": str(tmp_path / "none")}
    out = subprocess.run([sys.executable, "-m", "warden.cli", "runs"], capture_output=True, text=True, env=env,
                         cwd=ROOT, timeout=60)
    assert out.returncode != 0 and "warden up" in out.stderr


def test_run_follow_shows_a_child_run_in_place(up, tmp_path):
    script = tmp_path / "script.yaml"
    delegate = call("delegate", agent="triage", objective="Summarise task-abc123.", criteria=["summarised"])
    triage = [{"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [{"id": "r", "tool": "get_task"}]}},
              call("get_task", task_id="task-abc123"),
              {"action": "final", "summary": "no findings", "outcomes": [{"criterion": "c1", "met": True,
                                                                         "evidence": "get_task receipt"}]}]
    script.write_text(yaml.safe_dump({"responses": [delegate, {"action": "handoff", "reason": "read it"}],
                                      "delegates": {"triage": {"responses": triage}}}))
    out = warden(up, "run", "recon", "--goal", str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script),
                 "--follow")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    started = next(i for i, line in enumerate(lines) if "> child run run-" in line)
    ended = next(i for i, line in enumerate(lines) if "< child run run-" in line)
    child = [line for line in lines[started + 1:ended] if line.startswith("      | ")]
    assert any("receipt get_task: exit 0" in line for line in child)
    assert any("== succeeded" in line for line in child)
    assert "run paused (handoff)" in out.stdout  # and the parent went on after its child

    root = re.search(r"started (run-[0-9a-f-]+)", out.stdout).group(1)
    tree = warden(up, "runs", "--tree", root)
    assert tree.returncode == 0, tree.stderr
    first, second = tree.stdout.splitlines()
    assert first.startswith(root) and "recon@" in first and "paused" in first
    assert second.startswith("    run-") and "triage@" in second and "succeeded" in second
    assert f"parent {root}" in second
    missing = warden(up, "runs", "--tree", "run-nope")
    assert missing.returncode == 1 and "no run 'run-nope'" in missing.stderr
