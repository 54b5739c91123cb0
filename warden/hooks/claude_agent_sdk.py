"""The Claude Agent SDK: `can_use_tool`, the SDK's permission callback, as a Check() of each call.

    permissions = WardenPermissions(checkpoint, run, inbox=ApprovalInbox(path), wait=120)
    options = ClaudeAgentOptions(can_use_tool=permissions, ...)

Tools are named as `warden hook claude-code` names them (`Read` is `claude.read`, the MCP tool
`mcp__fs__read_text_file` is `fs__read_text_file`), so one policy governs both. ALLOW allows the
call with the arguments the checkpoint decided; DENY denies it with the code and reason; HALT
denies it, interrupts the agent and ends the run's calls. REQUIRE_APPROVAL is put in the approval
inbox: a person approves it at the checkpoint with their own credential (`warden inbox approve
ID`); the callback waits up to `wait` seconds for that answer, or denies the call naming the
approval id, and allows the same call, made again, once the person has approved it. Anything that
keeps it from deciding (the checkpoint unreachable, a refused request) denies the call.

The SDK calls `can_use_tool` only for calls its permission rules would otherwise prompt for: give
it no `allowed_tools` that allow a whole tool and no `bypassPermissions` mode, or use a
PreToolUse hook (`warden hook claude-code`) to see every call.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from claude_agent_sdk import PermissionResultAllow, PermissionResultDeny, ToolPermissionContext

from warden.client import ApprovalInbox, ApprovalOutcome, Asked, CheckpointClient, ClientError, Decision, Run
from warden.client.runs import call_digest
from warden.hooks.claude_code import tool_name

PermissionResult = PermissionResultAllow | PermissionResultDeny


class WardenPermissions:
    def __init__(self, checkpoint: CheckpointClient, run: Run, *, inbox: ApprovalInbox | str | Path | None = None,
                 wait: float = 0.0, asked_by: str = "claude-agent-sdk") -> None:
        self.checkpoint = checkpoint
        self.run = run
        self.inbox = ApprovalInbox(inbox) if isinstance(inbox, str | Path) else inbox
        self.wait = wait
        self.asked_by = asked_by
        self.waiting: dict[str, str] = {}  # call digest -> the decision that asked a person
        # the agent may ask for several calls at once: each reads and updates the run's counters in
        # turn, so the budget counts every one
        self._checking = asyncio.Lock()

    async def __call__(self, tool: str, tool_input: dict[str, Any], context: ToolPermissionContext) -> PermissionResult:
        try:
            return await self._decide(tool_name(tool), dict(tool_input))
        except ClientError as exc:  # unreachable or refused: no decision, the call does not run
            return PermissionResultDeny(message=f"warden: {exc.code}: {exc.message}")

    async def _check(self, tool: str, arguments: dict[str, Any], approval: ApprovalOutcome | None = None) -> Decision:
        async with self._checking:
            return await asyncio.to_thread(self.checkpoint.check, self.run, tool, arguments, approval=approval)

    async def _decide(self, tool: str, arguments: dict[str, Any]) -> PermissionResult:
        call = call_digest(tool, arguments)
        if call in self.waiting:  # the same call made again: the person's answer, if it came
            asked = self.waiting[call]
            outcome = await self._answer(asked, 0.0)
            if outcome is None:
                return PermissionResultDeny(message=f"warden: approval_pending: a person has not answered yet "
                                            f"(approval id {asked}); make the same call again once they have")
            del self.waiting[call]
            return await self._approved(tool, arguments, outcome)
        decision = await self._check(tool, arguments)
        if decision.verdict != "REQUIRE_APPROVAL":
            return await self._result(decision, arguments)
        if self.inbox is None:
            return PermissionResultDeny(message=f"warden: {decision.code}: {decision.reason} (approval id "
                                        f"{decision.decision_id}; this program has no approval inbox)")
        self.inbox.ask(Asked(decision.decision_id, self.run.run_id, tool, arguments, decision.reason,
                             f"{self.asked_by} for run {self.run.run_id}", time.time()))
        outcome = await self._answer(decision.decision_id, self.wait)
        if outcome is None:
            self.waiting[call] = decision.decision_id
            return PermissionResultDeny(message=f"warden: {decision.code}: {decision.reason}. A person approves it "
                                        f"(`warden inbox approve {decision.decision_id}`); then make the same "
                                        f"call again")
        return await self._approved(tool, arguments, outcome)

    async def _answer(self, decision_id: str, wait: float) -> ApprovalOutcome | None:
        assert self.inbox is not None
        inbox = self.inbox
        if wait <= 0:
            return await asyncio.to_thread(inbox.take, decision_id)
        return await asyncio.to_thread(inbox.wait, decision_id, wait)

    async def _approved(self, tool: str, arguments: dict[str, Any], outcome: ApprovalOutcome) -> PermissionResult:
        if not outcome.approved:
            return PermissionResultDeny(message=f"warden: approval_rejected: a person rejected this call "
                                        f"(approval id {outcome.decision_id})")
        # the checkpoint decides again, with the person's token: only it makes the approval count
        return await self._result(await self._check(tool, arguments, outcome), arguments)

    async def _result(self, decision: Decision, arguments: dict[str, Any]) -> PermissionResult:
        if decision.verdict == "HALT":
            try:
                await asyncio.to_thread(self.checkpoint.end_run, self.run, status="failed", code=decision.code)
            except ClientError:
                pass  # the HALT stands either way
            return PermissionResultDeny(message=f"warden: {decision.code}: {decision.reason}; this run's calls "
                                        "have ended", interrupt=True)
        if not decision.allowed:
            return PermissionResultDeny(message=f"warden: {decision.code}: {decision.reason} "
                                        f"(decision {decision.decision_id})")
        decided = decision.arguments if decision.arguments is not None else arguments
        return PermissionResultAllow(updated_input=dict(decided))
