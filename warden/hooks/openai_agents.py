"""The OpenAI Agents SDK: every function tool's call is a Check() with its arguments.

`WardenGuard(checkpoint, run).govern(tool)` sets two things on a FunctionTool: `needs_approval`,
which checks the call when the model proposes it and interrupts the run when the checkpoint asks
for a person; and a tool input guardrail, which lets the call run only on an ALLOW of those very
arguments (DENY and HALT reject it with the refusal as the model's tool result). A person
approves an interruption at the checkpoint with their own credential; the program hands the
outcome to `guard.approved(call_id, outcome)` and approves the interruption in the SDK
(`state.approve(item)`). Approving the interruption without a person's token approves nothing:
the guardrail rejects the call.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import FunctionTool, ToolGuardrailFunctionOutput, ToolInputGuardrail, ToolInputGuardrailData

from warden.client import ApprovalOutcome, CheckpointClient, ClientError, Decision, Run


class WardenGuard:
    def __init__(self, checkpoint: CheckpointClient, run: Run) -> None:
        self.checkpoint = checkpoint
        self.run = run
        # call id -> (the arguments decided, the decision); a person's outcome by call id
        self.decided: dict[str, tuple[dict[str, Any], Decision]] = {}
        self._approvals: dict[str, ApprovalOutcome] = {}
        self.guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(guardrail_function=self._guard, name="warden")

    def govern(self, tool: FunctionTool) -> FunctionTool:
        tool.needs_approval = self._needs_approval_of(tool.name)
        tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []), self.guardrail]
        return tool

    def decision(self, call_id: str) -> Decision | None:
        found = self.decided.get(call_id)
        return found[1] if found else None

    def approved(self, call_id: str, outcome: ApprovalOutcome) -> None:
        """A person's approval of the interrupted call, as the checkpoint's Approve answered it."""
        self._approvals[call_id] = outcome

    async def _check(self, tool: str, arguments: dict[str, Any], approval: ApprovalOutcome | None = None) -> Decision:
        return await asyncio.to_thread(self.checkpoint.check, self.run, tool, arguments, approval=approval)

    def _needs_approval_of(self, tool: str) -> Any:
        async def needs_approval(_ctx: Any, arguments: dict[str, Any], call_id: str) -> bool:
            try:
                decision = await self._check(tool, arguments)
            except ClientError:
                return False  # the guardrail checks again, and refuses if it still cannot
            self.decided[call_id] = (arguments, decision)
            return decision.verdict == "REQUIRE_APPROVAL"

        return needs_approval

    async def _guard(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context = data.context
        try:
            arguments = json.loads(context.tool_arguments or "{}")
        except ValueError:
            return ToolGuardrailFunctionOutput.reject_content("warden: invalid_arguments: not JSON")
        decided = self.decided.pop(context.tool_call_id, None)
        try:
            if decided is None or decided[0] != arguments:
                decision = await self._check(context.tool_name, arguments)  # never a decision about other arguments
            elif decided[1].verdict == "REQUIRE_APPROVAL":
                outcome = self._approvals.pop(context.tool_call_id, None)
                if outcome is None:
                    return ToolGuardrailFunctionOutput.reject_content(
                        f"warden: approval_required: {decided[1].reason} (decision {decided[1].decision_id}); "
                        "approving in the program is not a person's approval at the checkpoint")
                decision = await self._check(context.tool_name, arguments, outcome)
            else:
                decision = decided[1]
        except ClientError as exc:
            return ToolGuardrailFunctionOutput.reject_content(f"warden: {exc.code}: {exc.message}")
        if decision.verdict == "HALT":
            await asyncio.to_thread(self.checkpoint.end_run, self.run, status="failed", code=decision.code)
        if not decision.allowed:
            return ToolGuardrailFunctionOutput.reject_content(f"warden: {decision.code}: {decision.reason}",
                                                              output_info={"decision_id": decision.decision_id})
        return ToolGuardrailFunctionOutput.allow(output_info={"decision_id": decision.decision_id})
