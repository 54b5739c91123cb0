"""The gateway's MCP server: tools/list from the policy, tools/call as a Check() first.

One gateway process serves one principal (the identity its settings name: the stdio launcher's
person and agent), in one run started for them; nothing is taken from the client's own
`clientInfo` or session. The checkpoint is called from a worker thread (its client is sync).
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from warden.client import (
    ApprovalInbox,
    ApprovalOutcome,
    Asked,
    CheckpointClient,
    CheckpointUnavailable,
    ClientError,
    Decision,
    Run,
)
from warden.client.runs import call_digest
from warden.mcp import catalog, codes
from warden.mcp.pins import Pins
from warden.mcp.results import refusal, scrubbed
from warden.mcp.settings import Settings
from warden.mcp.upstreams import Upstreams

INTERNAL_ERROR = -32603


class Gateway:
    def __init__(self, settings: Settings, checkpoint: CheckpointClient, upstreams: Upstreams, pins: Pins,
                 inbox: ApprovalInbox) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.upstreams = upstreams
        self.pins = pins
        self.inbox = inbox
        self.run: Run | None = None
        self.tools: dict[str, catalog.Exposed] = {}
        self.waiting: dict[str, str] = {}  # call digest -> the REQUIRE_APPROVAL decision it waits on
        self._lock = anyio.Lock()

    def server(self) -> Server:
        return Server("warden-mcp", version="1", on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                      instructions="Tools governed by warden: a refused call says why, with a stable code.")

    async def _the_run(self) -> Run:
        async with self._lock:
            if self.run is None:
                s = self.settings
                self.run = await anyio.to_thread.run_sync(lambda: self.checkpoint.start_run(
                    person=s.person, agent=s.agent, tenant=s.tenant, inputs={"client": "mcp"}))
            return self.run

    async def _refresh(self, run: Run) -> None:
        self.tools = catalog.build(await self.upstreams.listings(), frozenset(run.tools), self.pins)

    async def list_tools(self, _ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            run = await self._the_run()
        except ClientError as exc:
            raise MCPError(INTERNAL_ERROR, f"warden: {exc.code}: {exc.message}") from None
        await self._refresh(run)
        return types.ListToolsResult(tools=[t.tool for t in self.tools.values() if not t.refused])

    async def call_tool(self, _ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        try:
            run = await self._the_run()
        except CheckpointUnavailable as exc:
            return refusal(codes.CHECKPOINT_UNAVAILABLE, exc.message)
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        exposed = self.tools.get(params.name)
        if exposed is None:  # a client may call before it lists: ask the upstreams now, never trust a list
            await self._refresh(run)
            exposed = self.tools.get(params.name)
        if exposed is None:
            return await self._never_shown(run, params.name, arguments)
        if exposed.refused:
            return refusal(exposed.refused, f"the upstream's tool {exposed.upstream_name!r} is refused "
                           f"({exposed.refused}); a person must review it (`warden mcp pins`)")
        call = call_digest(exposed.name, arguments)
        approval: ApprovalOutcome | None = None
        if call in self.waiting:
            approval = self.inbox.take(self.waiting[call])
            if approval is None:
                return refusal(codes.APPROVAL_PENDING, "a person has not answered yet: try the same call again "
                               "once they have", approval_id=self.waiting[call])
            del self.waiting[call]
            if not approval.approved:
                return refusal(codes.APPROVAL_REJECTED, "a person rejected this call",
                               approval_id=approval.decision_id)
        try:
            decision = await anyio.to_thread.run_sync(
                lambda: self.checkpoint.check(run, exposed.name, arguments, approval=approval))
        except CheckpointUnavailable as exc:
            return refusal(codes.CHECKPOINT_UNAVAILABLE, exc.message)
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        if decision.verdict == "REQUIRE_APPROVAL":
            return self._ask(run, exposed.name, arguments, call, decision)
        if not decision.allowed:
            return refusal(decision.code, decision.reason, verdict=decision.verdict, decision_id=decision.decision_id)
        return await self._forward(run, exposed, decision.arguments or arguments)

    async def _never_shown(self, run: Run, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """A call of a tool this client was never shown is still a Check, so it is on the record
        with the principal; whatever the answer, no upstream has such a tool to call."""
        try:
            decision = await anyio.to_thread.run_sync(lambda: self.checkpoint.check(run, name, arguments))
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        if not decision.allowed:
            return refusal(decision.code, decision.reason, verdict=decision.verdict, decision_id=decision.decision_id)
        return refusal(codes.UNKNOWN_TOOL, f"no upstream serves a tool {name!r} to this client")

    def _ask(self, run: Run, name: str, arguments: dict[str, Any], call: str, decision: Decision) -> types.CallToolResult:
        self.inbox.ask(Asked(decision.decision_id, run.run_id, name, arguments, decision.reason,
                             f"mcp gateway for {self.settings.person}", time.time()))
        self.waiting[call] = decision.decision_id
        return refusal(decision.code, f"{decision.reason}. A person approves it (`warden inbox approve "
                       f"{decision.decision_id}`); then make the same call again",
                       verdict=decision.verdict, approval_id=decision.decision_id)

    async def _forward(self, run: Run, exposed: catalog.Exposed, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            result = await self.upstreams.call(exposed.upstream, exposed.upstream_name, arguments)
        except Exception as exc:  # noqa: BLE001 - the upstream's failure is the client's error result
            run.report_result(False)
            return refusal(codes.UPSTREAM_UNAVAILABLE, f"upstream {exposed.upstream!r}: {type(exc).__name__}: {exc}")
        clean, _masked = scrubbed(result, self.settings.max_result_bytes)
        run.report_result(not clean.is_error)
        return clean
