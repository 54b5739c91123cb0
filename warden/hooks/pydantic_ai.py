"""Pydantic AI: a capability that checks every tool call with the arguments that will run.

Add `WardenTools(checkpoint, run)` to an Agent's `capabilities`. Each tool call, once Pydantic AI
validated its arguments, is a Check(): ALLOW runs the tool; DENY and HALT return the refusal to
the model as the tool's result (the tool does not run); REQUIRE_APPROVAL defers the call with
`ApprovalRequired`, so the run ends with `DeferredToolRequests` naming the decision. A person
approves it at the checkpoint with their own credential; the program resumes the run with
`DeferredToolResults`, the call approved and `approval_metadata(outcome)` as its metadata. Only
that token approves: approving the deferred call without it asks the checkpoint again, which
asks for a person again.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import ApprovalRequired

from warden.client import ApprovalOutcome, CheckpointClient, ClientError, Run

TOKEN_KEY, DECISION_KEY = "warden_approval_token", "warden_decision_id"


def approval_metadata(outcome: ApprovalOutcome) -> dict[str, str]:
    """The metadata of an approved deferred call: the checkpoint's token for a person's approval."""
    return {TOKEN_KEY: outcome.token, DECISION_KEY: outcome.decision_id}


@dataclass
class WardenTools(AbstractCapability[Any]):
    checkpoint: CheckpointClient
    run: Run

    async def wrap_tool_execute(self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any) -> Any:
        arguments = dict(args) if isinstance(args, dict) else {}
        approval = None
        metadata = ctx.tool_call_metadata if ctx.tool_call_approved else None
        if isinstance(metadata, dict) and metadata.get(TOKEN_KEY):
            approval = ApprovalOutcome(str(metadata.get(DECISION_KEY, "")), self.run.run_id, True,
                                       str(metadata[TOKEN_KEY]), "")
        try:
            decision = await asyncio.to_thread(self.checkpoint.check, self.run, tool_def.name, arguments,
                                               approval=approval)
        except ClientError as exc:  # unreachable or refused: the tool does not run
            return f"warden: {exc.code}: {exc.message}"
        if decision.verdict == "REQUIRE_APPROVAL" and not ctx.tool_call_approved:
            raise ApprovalRequired(metadata={DECISION_KEY: decision.decision_id, "warden_run_id": self.run.run_id,
                                             "reason": decision.reason})
        if decision.verdict == "HALT":
            await asyncio.to_thread(self.checkpoint.end_run, self.run, status="failed", code=decision.code)
        if not decision.allowed:
            return f"warden: {decision.code}: {decision.reason}"
        try:
            result = await handler(decision.arguments or args)
        except Exception:
            self.run.report_result(False)
            raise
        self.run.report_result(True)
        return result
