"""`warden hook claude-code`, the real command, against a real checkpoint: hook JSON as Claude Code
documents it on stdin, the answer on stdout, and exit 2 whenever it cannot decide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN, REPO


@pytest.fixture
def hook(checkpoint, tmp_path: Path):
    credentials = tmp_path / "credentials"
    credentials.mkdir(mode=0o700)
    (credentials / "hook.token").write_text(GATEWAY_TOKEN + "\n")
    (credentials / "alice.token").write_text(ALICE_TOKEN + "\n")
    for f in credentials.iterdir():
        f.chmod(0o600)
    state = tmp_path / "state"

    def warden(*argv: str, stdin: str = "") -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-m", "warden.cli", *argv], input=stdin, capture_output=True,
                              text=True, timeout=60, cwd=REPO, env=env)

    def call(tool: str, tool_input: dict, *, session: str = "s-1", checkpoint_address: str = checkpoint.address,
             flags: tuple[str, ...] = (), **extra) -> subprocess.CompletedProcess:
        event = {"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": str(checkpoint.shared),
                 "hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": tool_input,
                 "tool_use_id": "toolu_01", **extra}
        return warden("hook", "claude-code", "--checkpoint", checkpoint_address, "--token-file",
                      str(credentials / "hook.token"), "--person", "alice", "--state", str(state), *flags,
                      stdin=json.dumps(event))

    def raw(stdin: str) -> subprocess.CompletedProcess:
        return warden("hook", "claude-code", "--checkpoint", checkpoint.address, "--token-file",
                      str(credentials / "hook.token"), "--person", "alice", "--state", str(state), stdin=stdin)

    call.raw = raw  # type: ignore[attr-defined]
    call.warden = warden  # type: ignore[attr-defined]
    call.inbox = state / "approvals.db"  # type: ignore[attr-defined]
    call.person_credential = credentials / "alice.token"  # type: ignore[attr-defined]
    return call


def decision(done: subprocess.CompletedProcess) -> tuple[str, str]:
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)["hookSpecificOutput"]
    assert out["hookEventName"] == "PreToolUse"
    return out["permissionDecision"], out["permissionDecisionReason"]


def test_a_read_inside_the_folder_is_allowed_and_one_outside_is_denied_by_scope(hook, checkpoint):
    assert decision(hook("Read", {"file_path": f"{checkpoint.shared}/a.txt"}))[0] == "allow"
    verdict, reason = decision(hook("Read", {"file_path": "/etc/shadow"}))
    assert verdict == "deny" and "subject_out_of_scope" in reason
    # an MCP server's tool has the name the gateway gives it
    assert decision(hook("mcp__fs__read_text_file", {"path": f"{checkpoint.shared}/b.txt"}))[0] == "allow"
    calls = [(r["tool"], r["code"], r["run_id"]) for r in checkpoint.records() if r["action"] == "tool_call"]
    assert [c[:2] for c in calls] == [("claude.read", "allowed"), ("claude.read", "subject_out_of_scope"),
                                      ("fs__read_text_file", "allowed")]
    assert len({c[2] for c in calls}) == 1  # one session, one run


def test_a_shell_command_waits_for_the_person_and_runs_once_they_approve(hook, checkpoint):
    command = {"command": "make test", "description": "run the tests"}
    verdict, reason = decision(hook("Bash", command))
    assert verdict == "deny" and "approval_required" in reason
    decision_id = reason.split("warden inbox approve ", 1)[1].split("`", 1)[0]
    listed = hook.warden("inbox", "list", "--inbox", str(hook.inbox))
    assert decision_id in listed.stdout and "claude.bash" in listed.stdout
    # the retry before anyone approved is refused, and asks nothing new
    assert "still waiting" in decision(hook("Bash", command))[1]
    approved = hook.warden("inbox", "approve", decision_id, "--inbox", str(hook.inbox), "--checkpoint",
                           checkpoint.address, "--credential", str(hook.person_credential))
    assert approved.returncode == 0, approved.stderr
    assert 'the checkpoint recorded: claude.bash {"command": "make test", "description": "run the tests"}' \
        in approved.stdout
    assert decision(hook("Bash", command))[0] == "allow"
    approval = [r for r in checkpoint.records() if r["action"] == "approval"]
    assert [(r["approver"], r["code"]) for r in approval] == [("alice", "approved")]
    # the approval was spent: the same command again asks again
    assert "approval_required" in decision(hook("Bash", command))[1]


def test_a_rejected_call_is_denied(hook, checkpoint):
    write = {"file_path": f"{checkpoint.shared}/x.txt", "content": "x"}
    decision_id = decision(hook("Write", write))[1].split("warden inbox approve ", 1)[1].split("`", 1)[0]
    rejected = hook.warden("inbox", "reject", decision_id, "--inbox", str(hook.inbox), "--checkpoint",
                           checkpoint.address, "--credential", str(hook.person_credential))
    assert rejected.returncode == 0, rejected.stderr
    verdict, reason = decision(hook("Write", write))
    assert verdict == "deny" and "rejected" in reason


def test_a_sub_agent_acts_in_a_run_of_its_own(hook, checkpoint):
    path = {"file_path": f"{checkpoint.shared}/a.txt"}
    assert decision(hook("Read", path))[0] == "allow"
    assert decision(hook("Read", path, agent_id="agent-7", agent_type="Explore"))[0] == "allow"
    runs = [r["run_id"] for r in checkpoint.records() if r["action"] == "tool_call"]
    assert len(set(runs)) == 2


def test_an_unreachable_checkpoint_blocks_the_call(hook):
    done = hook("Read", {"file_path": "/srv/a"}, checkpoint_address="127.0.0.1:1")
    assert done.returncode == 2 and done.stdout == ""
    assert "checkpoint_unavailable" in done.stderr


@pytest.mark.parametrize("stdin", ["not json", "[]", json.dumps({"hook_event_name": "PostToolUse"}),
                                   json.dumps({"hook_event_name": "PreToolUse", "session_id": "s"})])
def test_an_event_the_hook_cannot_read_blocks_the_call(hook, stdin):
    done = hook.raw(stdin)
    assert done.returncode == 2 and done.stdout == "" and "blocked" in done.stderr, done.stderr


def test_a_hook_without_its_credential_blocks_the_call(hook):
    done = hook.warden("hook", "claude-code", "--token-file", "/nonexistent", "--person", "alice",
                       stdin=json.dumps({"hook_event_name": "PreToolUse"}))
    assert done.returncode == 2 and done.stdout == "" and "credential" in done.stderr


def test_a_halt_ends_the_sessions_calls(hook, checkpoint):
    same = {"file_path": f"{checkpoint.shared}/a.txt"}
    for _ in range(3):  # acme's repetition ceiling: the fourth identical call halts
        assert decision(hook("Read", same))[0] == "allow"
    verdict, reason = decision(hook("Read", same))
    assert verdict == "deny" and "breaker_repetition" in reason
    verdict, reason = decision(hook("Read", {"file_path": f"{checkpoint.shared}/b.txt"}))
    assert verdict == "deny" and "run_ended" in reason
    # a new session is a new run
    assert decision(hook("Read", {"file_path": f"{checkpoint.shared}/b.txt"}, session="s-2"))[0] == "allow"


def test_the_person_approves_the_call_the_checkpoint_recorded_not_what_the_inbox_says(hook, checkpoint):
    import sqlite3

    decision_id = decision(hook("Bash", {"command": "rm -rf /"}))[1].split("warden inbox approve ", 1)[1].split("`")[0]
    # a process that can write the inbox dresses the call up as another tool
    with sqlite3.connect(hook.inbox) as db:
        db.execute("UPDATE asked SET tool = 'claude.read', arguments = '{\"file_path\": \"/srv/shared/a\"}'")
    refused = hook.warden("inbox", "approve", decision_id, "--inbox", str(hook.inbox), "--checkpoint",
                          checkpoint.address, "--credential", str(hook.person_credential))
    assert refused.returncode == 1 and "approval_mismatch" in refused.stderr
    assert not [r for r in checkpoint.records() if r["action"] == "approval"]


def test_parallel_calls_count_against_the_run_each_once(checkpoint, tmp_path):
    """Claude Code runs the hooks of parallel tool calls at once, each a process of its own with
    its own connections: four identical calls made together still trip the repetition breaker
    (ceiling 3) on exactly one of them."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from warden.client import CheckpointClient
    from warden.hooks.claude_code import ClaudeCodeHook, Settings

    settings = Settings(checkpoint=checkpoint.address, token=GATEWAY_TOKEN, person="alice", state=tmp_path / "state",
                        inbox=tmp_path / "state" / "approvals.db")
    event = {"session_id": "s-par", "hook_event_name": "PreToolUse", "tool_name": "Read",
             "tool_input": {"file_path": f"{checkpoint.shared}/a.txt"}}
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as first:
        ClaudeCodeHook(settings, first).decide({**event, "tool_input": {"file_path": f"{checkpoint.shared}/b"}})
    together = threading.Barrier(4)

    def one(_n: int) -> str:
        with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
            hook = ClaudeCodeHook(settings, client)
            together.wait()
            return hook.decide(event)["hookSpecificOutput"]["permissionDecisionReason"]

    with ThreadPoolExecutor(4) as pool:
        reasons = list(pool.map(one, range(4)))
    assert sum("breaker_repetition" in r for r in reasons) == 1, reasons


def test_with_on_approval_ask_a_call_waiting_for_a_person_is_left_to_claude_codes_prompt(hook, checkpoint):
    verdict, reason = decision(hook("Bash", {"command": "ls"}, flags=("--on-approval", "ask")))
    assert verdict == "ask" and "approval_required" in reason
    # what the checkpoint refuses is still refused
    assert decision(hook("Read", {"file_path": "/etc/shadow"}, flags=("--on-approval", "ask")))[0] == "deny"
