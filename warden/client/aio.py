"""The checkpoint client for asyncio programs: the same calls, awaitable.

Each call runs the sync client's in a worker thread: one code path decides how a failure maps to
a stable code and when the checkpoint counts as unavailable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from warden.client.approvals import ApprovalInbox, ApprovalOutcome
from warden.client.checkpoint import CheckpointClient
from warden.client.runs import Decision, Run


class AsyncCheckpointClient:
    def __init__(self, address: str, *, token: str | None = None, timeout: float = 10.0) -> None:
        self.sync = CheckpointClient(address, token=token, timeout=timeout)

    async def __aenter__(self) -> AsyncCheckpointClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.sync.close()

    async def start_run(self, *, person: str, agent: str = "", tenant: str = "", agent_version: str = "",
                        mode: str = "interactive", inputs: dict[str, Any] | None = None) -> Run:
        return await asyncio.to_thread(lambda: self.sync.start_run(
            person=person, agent=agent, tenant=tenant, agent_version=agent_version, mode=mode, inputs=inputs))

    async def check(self, run: Run, tool: str, arguments: dict[str, Any], *,
                    approval: ApprovalOutcome | None = None) -> Decision:
        return await asyncio.to_thread(lambda: self.sync.check(run, tool, arguments, approval=approval))

    def report_result(self, run: Run, *, ok: bool) -> None:
        self.sync.report_result(run, ok=ok)

    async def end_run(self, run: Run, *, status: str = "succeeded", code: str = "") -> Decision:
        return await asyncio.to_thread(lambda: self.sync.end_run(run, status=status, code=code))

    async def approve(self, run_id: str, decision_id: str, note: str = "") -> ApprovalOutcome:
        return await asyncio.to_thread(lambda: self.sync.approve(run_id, decision_id, note))

    async def reject(self, run_id: str, decision_id: str, note: str = "") -> ApprovalOutcome:
        return await asyncio.to_thread(lambda: self.sync.reject(run_id, decision_id, note))

    async def wait_for_approval(self, inbox: ApprovalInbox, decision: Decision, timeout: float) -> ApprovalOutcome | None:
        return await asyncio.to_thread(lambda: inbox.wait(decision.decision_id, timeout))
