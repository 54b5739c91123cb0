"""The Claude Agent SDK's permission callback, called with the SDK's own types, against a real
checkpoint. (No end-to-end run through the Claude Code CLI: that needs the CLI and a model.)"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import (  # noqa: E402
    ClaudeAgentOptions,
    PermissionResultAllow,
    PermissionResultDeny,
    ToolPermissionContext,
)

from warden.client import ApprovalInbox, CheckpointClient  # noqa: E402
from warden.hooks.claude_agent_sdk import WardenPermissions  # noqa: E402

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN  # noqa: E402


def context(n: int = 1) -> ToolPermissionContext:
    return ToolPermissionContext(tool_use_id=f"toolu_{n:04d}")


def approval_id(result: PermissionResultDeny) -> str:
    return result.message.split("warden inbox approve ", 1)[1].split("`", 1)[0]


@pytest.fixture
def permissions(checkpoint, tmp_path):
    clients: list[CheckpointClient] = []

    def make(wait: float = 0.0, address: str = checkpoint.address, inbox: bool = True) -> WardenPermissions:
        client = CheckpointClient(address, token=GATEWAY_TOKEN, timeout=3)
        clients.append(client)
        run = client.start_run(person="alice", agent="claude-code")
        return WardenPermissions(client, run, inbox=tmp_path / "approvals.db" if inbox else None, wait=wait)

    yield make
    for client in clients:
        client.close()


def person_answers(checkpoint, inbox_path, decision_id: str, run_id: str, approve: bool) -> None:
    """What `warden inbox approve|reject` does: the person's own credential, relayed to the inbox."""
    with CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
        outcome = (person.approve if approve else person.reject)(run_id, decision_id)
    ApprovalInbox(inbox_path).put(outcome)


def test_the_callback_is_the_sdks_can_use_tool(permissions):
    allowed = permissions()
    assert ClaudeAgentOptions(can_use_tool=allowed).can_use_tool is allowed


def test_a_read_inside_is_allowed_and_one_outside_is_denied(permissions, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")
    allow = permissions()

    async def scenario():
        inside = await allow("Read", {"file_path": f"{checkpoint.shared}/a.txt"}, context(1))
        assert isinstance(inside, PermissionResultAllow)
        assert inside.updated_input == {"file_path": f"{checkpoint.shared}/a.txt"}
        for n, path in enumerate(("/etc/passwd", f"{checkpoint.shared}/../../etc/passwd"), 2):
            outside = await allow("Read", {"file_path": path}, context(n))
            assert isinstance(outside, PermissionResultDeny) and outside.message.startswith("warden: ")
            assert not outside.interrupt
        mcp = await allow("mcp__fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"}, context(9))
        assert isinstance(mcp, PermissionResultAllow)  # the gateway's name for the same server's tool
        relative = await allow("Read", {"file_path": "relative/a.txt"}, context(10))
        assert isinstance(relative, PermissionResultDeny)
        unknown = await allow("WebFetch", {"url": "https://example.com"}, context(11))
        assert isinstance(unknown, PermissionResultDeny)

    asyncio.run(scenario())
    calls = [(r["tool"], r["verdict"], r["accountable_person"]) for r in checkpoint.records()
             if r["action"] == "tool_call"]
    assert calls[0] == ("claude.read", "ALLOW", "alice")
    assert [c[1] for c in calls[1:3]] == ["DENY", "DENY"]
    assert calls[3] == ("fs__read_text_file", "ALLOW", "alice")
    assert (calls[4][1], calls[5][:2]) == ("DENY", ("claude.webfetch", "DENY"))


def test_a_shell_command_is_denied_with_its_approval_id_then_allowed_once_a_person_approves(
        permissions, checkpoint, tmp_path):
    perms = permissions()
    bash = {"command": "make test"}

    async def scenario():
        first = await perms("Bash", bash, context(1))
        assert isinstance(first, PermissionResultDeny) and "approval_required" in first.message
        decision_id = approval_id(first)
        inbox = ApprovalInbox(tmp_path / "approvals.db")
        assert [a.tool for a in inbox.waiting()] == ["claude.bash"]
        again = await perms("Bash", bash, context(2))  # before anyone answered: still denied
        assert isinstance(again, PermissionResultDeny) and decision_id in again.message
        other = await perms("Bash", {"command": "rm -rf /"}, context(3))  # another command asks anew
        assert isinstance(other, PermissionResultDeny) and approval_id(other) != decision_id
        person_answers(checkpoint, tmp_path / "approvals.db", decision_id, perms.run.run_id, approve=True)
        approved = await perms("Bash", bash, context(4))
        assert isinstance(approved, PermissionResultAllow) and approved.updated_input == bash
        # the approval was used once: the same command again asks a person again
        fourth = await perms("Bash", bash, context(5))
        assert isinstance(fourth, PermissionResultDeny) and approval_id(fourth) != decision_id

    asyncio.run(scenario())
    approvals = [r for r in checkpoint.records() if r["action"] == "approval"]
    assert [(r["approver"], r["code"]) for r in approvals] == [("alice", "approved")]


def test_waiting_for_a_person_allows_or_denies_when_they_answer(permissions, checkpoint, tmp_path):
    perms = permissions(wait=20)
    inbox_path = tmp_path / "approvals.db"

    def answer_when_asked(approve: bool) -> threading.Thread:
        def answer() -> None:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                asked = ApprovalInbox(inbox_path).waiting()
                if asked:
                    person_answers(checkpoint, inbox_path, asked[0].decision_id, perms.run.run_id, approve)
                    return
                time.sleep(0.05)

        thread = threading.Thread(target=answer)
        thread.start()
        return thread

    async def scenario():
        thread = answer_when_asked(True)
        allowed = await perms("Bash", {"command": "ls"}, context(1))
        thread.join()
        assert isinstance(allowed, PermissionResultAllow)
        thread = answer_when_asked(False)
        rejected = await perms("Bash", {"command": "rm -rf /"}, context(2))
        thread.join()
        assert isinstance(rejected, PermissionResultDeny) and "approval_rejected" in rejected.message

    asyncio.run(scenario())


def test_without_an_inbox_a_call_for_a_person_is_denied_with_its_approval_id(permissions, checkpoint):
    perms = permissions(inbox=False)
    result = asyncio.run(perms("Write", {"file_path": f"{checkpoint.shared}/w.txt", "content": "x"}, context()))
    assert isinstance(result, PermissionResultDeny) and "approval id" in result.message
    asked = [r for r in checkpoint.records() if r["action"] == "tool_call"]
    assert asked[0]["verdict"] == "REQUIRE_APPROVAL" and asked[0]["decision_id"] in result.message


def test_an_unreachable_checkpoint_denies_the_call(permissions, checkpoint):
    perms = permissions()
    checkpoint.server.stop(grace=0)
    result = asyncio.run(perms("Read", {"file_path": f"{checkpoint.shared}/a.txt"}, context()))
    assert isinstance(result, PermissionResultDeny)
    assert result.message.startswith("warden: checkpoint_unavailable")


def test_a_halt_denies_interrupts_and_ends_the_runs_calls(permissions, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")
    perms = permissions()

    async def scenario():
        # three denials in a row trip the run's failure breaker: the next call it would allow is a HALT
        denied = [await perms("Read", {"file_path": "/etc/passwd"}, context(n)) for n in range(3)]
        return [*denied, await perms("Read", {"file_path": f"{checkpoint.shared}/a.txt"}, context(3))]

    results = asyncio.run(scenario())
    assert [isinstance(r, PermissionResultDeny) and r.interrupt for r in results] == [False, False, False, True]
    assert "breaker_failures" in results[3].message
    after = asyncio.run(perms("Read", {"file_path": f"{checkpoint.shared}/a.txt"}, context(99)))
    assert isinstance(after, PermissionResultDeny) and "run_ended" in after.message
