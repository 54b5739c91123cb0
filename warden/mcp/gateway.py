"""The gateway's MCP server: tools/list from the policy, tools/call as a Check() first.

Each principal (the stdio launcher's configured identity, or an HTTP client's token) has one run,
started for its person and agent when it first lists or calls; nothing is taken from the client's
own `clientInfo` or from a transport session. The checkpoint is called from a worker thread (its
client is sync).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

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
from warden.mcp.principals import Principals
from warden.mcp.request_state import RequestStates, StateRefused, load_key
from warden.mcp.results import refusal, scrubbed, too_large
from warden.mcp.settings import Client, Settings
from warden.mcp.upstreams import Upstreams

INTERNAL_ERROR = -32603
UNAUTHENTICATED = "unauthenticated"


@dataclass
class _Served:
    """One principal's run, the tools it was last shown, and its calls that wait for a person."""

    run: Run
    tools: dict[str, catalog.Exposed] = field(default_factory=dict)
    waiting: dict[str, str] = field(default_factory=dict)  # call digest -> the REQUIRE_APPROVAL decision
    # a client may send calls at once: each reads and updates the run's counters in turn, so the
    # breakers count every one
    checking: anyio.Lock = field(default_factory=anyio.Lock)


class Gateway:
    def __init__(self, settings: Settings, checkpoint: CheckpointClient, upstreams: Upstreams, pins: Pins,
                 inbox: ApprovalInbox, principals: Principals, states: RequestStates | None = None) -> None:
        self.settings = settings
        self.checkpoint = checkpoint
        self.upstreams = upstreams
        self.pins = pins
        self.inbox = inbox
        self.principals = principals
        self.states = states or RequestStates(load_key(settings.state))
        self.served: dict[str, _Served] = {}
        self._lock = anyio.Lock()

    def server(self) -> Server:
        return Server("warden-mcp", version="1", on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                      instructions="Tools governed by warden: a refused call says why, with a stable code.")

    async def _served(self, who: Client) -> _Served:
        async with self._lock:
            if who.name not in self.served:
                run = await anyio.to_thread.run_sync(lambda: self.checkpoint.start_run(
                    person=who.person, agent=who.agent, tenant=who.tenant, inputs={"client": "mcp", "principal": who.name}))
                self.served[who.name] = _Served(run)
            return self.served[who.name]

    async def _refresh(self, served: _Served) -> set[str]:
        """The tools this principal may be shown now; returns every name the upstreams list."""
        listings = await self.upstreams.listings()
        served.tools = catalog.build(listings, frozenset(served.run.tools), self.pins)
        return {catalog.exposed_name(u, t.name) for u, tools in listings.items() for t in tools}

    async def _record(self, run: Run, details: dict[str, Any]) -> str:
        """The gateway's own decision on the checkpoint's log (act "gateway"); its decision id."""
        decision = await anyio.to_thread.run_sync(lambda: self.checkpoint.record_gateway(run, details))
        return decision.decision_id

    async def _refuse(self, who: Client, run: Run, code: str, reason: str, *, tool: str, upstream: str = "",
                      **extra: Any) -> types.CallToolResult:
        """A refusal the gateway makes itself, recorded with the principal, client and upstream
        before the client reads it. Not recorded (the checkpoint is down): refused all the same."""
        details = {"event": "refused", "client": who.name, "tool": tool[:128], "upstream": upstream, "code": code,
                   "reason": reason[:500], **extra}
        try:
            recorded = await self._record(run, details)
        except ClientError as exc:
            return refusal(code, f"{reason} (not recorded: {exc.code})", **extra)
        return refusal(code, reason, decision_id=recorded, **extra)

    async def list_tools(self, ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        who = self.principals.of(ctx)
        if who is None:
            raise MCPError(INTERNAL_ERROR, f"warden: {UNAUTHENTICATED}: no credential the gateway knows")
        try:
            served = await self._served(who)
        except ClientError as exc:
            raise MCPError(INTERNAL_ERROR, f"warden: {exc.code}: {exc.message}") from None
        listed = await self._refresh(served)
        shown = sorted(t.name for t in served.tools.values() if not t.refused)
        try:  # what this principal was shown and not shown is on the log before the client reads it
            await self._record(served.run, {"event": "listed", "client": who.name, "shown": shown,
                                            "hidden": sorted(listed - set(shown))})
        except ClientError as exc:
            code = codes.CHECKPOINT_UNAVAILABLE if isinstance(exc, CheckpointUnavailable) else exc.code
            raise MCPError(INTERNAL_ERROR, f"warden: {code}: the list could not be recorded: {exc.message}") from None
        return types.ListToolsResult(tools=[served.tools[name].tool for name in shown])

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = dict(params.arguments or {})
        who = self.principals.of(ctx)
        if who is None:
            return refusal(UNAUTHENTICATED, "no credential the gateway knows")
        try:
            served = await self._served(who)
        except CheckpointUnavailable as exc:
            return refusal(codes.CHECKPOINT_UNAVAILABLE, exc.message)
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        run = served.run
        if claim := _claimed_approval(params):  # the gateway never asks the client for input
            return await self._refuse(who, run, codes.APPROVAL_NOT_FROM_CLIENT, f"{claim}: only a person's "
                                      "approval at the checkpoint approves a call", tool=params.name)
        exposed = served.tools.get(params.name)
        if exposed is None:  # a client may call before it lists: ask the upstreams now, never trust a list
            await self._refresh(served)
            exposed = served.tools.get(params.name)
        if exposed is None:
            return await self._never_shown(who, run, params.name, arguments)
        if exposed.refused:
            return await self._refuse(who, run, exposed.refused, f"the upstream's tool {exposed.upstream_name!r} is "
                                      f"refused ({exposed.refused}); a person must review it (`warden mcp pins`)",
                                      tool=exposed.name, upstream=exposed.upstream)
        call = call_digest(exposed.name, arguments)
        approval: ApprovalOutcome | None = None
        if params.request_state is not None:
            answer = await self._state_approval(who, served, exposed, call, params.request_state)
            if isinstance(answer, types.CallToolResult):
                return answer
            approval = answer
        elif call in served.waiting:
            approval = self.inbox.take(served.waiting[call])
            if approval is None:
                return await self._refuse(who, run, codes.APPROVAL_PENDING, "a person has not answered yet: try "
                                          "the same call again once they have", tool=exposed.name,
                                          upstream=exposed.upstream, approval_id=served.waiting[call])
            del served.waiting[call]
            self.states.spend(approval.decision_id)  # its input_required state, if any, is spent with it
            if not approval.approved:
                return await self._refuse(who, run, codes.APPROVAL_REJECTED, "a person rejected this call",
                                          tool=exposed.name, upstream=exposed.upstream,
                                          approval_id=approval.decision_id)
        try:
            async with served.checking:
                decision = await anyio.to_thread.run_sync(
                    lambda: self.checkpoint.check(run, exposed.name, arguments, approval=approval))
        except CheckpointUnavailable as exc:
            return refusal(codes.CHECKPOINT_UNAVAILABLE, exc.message)
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        if decision.verdict == "REQUIRE_APPROVAL":
            return self._ask(who, served, exposed, arguments, call, decision,
                             modern=getattr(ctx, "protocol_version", "") in MODERN_PROTOCOL_VERSIONS)
        if decision.verdict == "HALT":
            return await self._halt(run, decision)
        if not decision.allowed:
            return refusal(decision.code, decision.reason, verdict=decision.verdict, decision_id=decision.decision_id)
        return await self._forward(who, run, exposed, decision.arguments if decision.arguments is not None else arguments)

    async def _halt(self, run: Run, decision: Decision) -> types.CallToolResult:
        """A HALT ends the run's calls: its end is recorded, so the checkpoint refuses every later
        call of it (`run_ended`, on the record); a new gateway starts a new run."""
        try:
            await anyio.to_thread.run_sync(lambda: self.checkpoint.end_run(run, status="failed", code=decision.code))
        except ClientError:
            pass  # the HALT stands either way; an end not recorded leaves the breaker to trip again
        return refusal(decision.code, f"{decision.reason}; this run's calls have ended",
                       verdict=decision.verdict, decision_id=decision.decision_id)

    async def _never_shown(self, who: Client, run: Run, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """A call of a tool this client was never shown is still a Check, so it is on the record
        with the principal; whatever the answer, no upstream has such a tool to call."""
        try:
            decision = await anyio.to_thread.run_sync(lambda: self.checkpoint.check(run, name, arguments))
        except ClientError as exc:
            return refusal(exc.code, exc.message)
        if not decision.allowed:
            return refusal(decision.code, decision.reason, verdict=decision.verdict, decision_id=decision.decision_id)
        return await self._refuse(who, run, codes.UNKNOWN_TOOL, f"no upstream serves a tool {name!r} to this client",
                                  tool=name)

    def _ask(self, who: Client, served: _Served, exposed: catalog.Exposed, arguments: dict[str, Any], call: str,
             decision: Decision, *, modern: bool) -> types.CallToolResult | types.InputRequiredResult:
        self.inbox.ask(Asked(decision.decision_id, served.run.run_id, exposed.name, arguments, decision.reason,
                             f"mcp gateway client {who.name} for {who.person}", time.time()))
        served.waiting[call] = decision.decision_id
        asked = refusal(decision.code, f"{decision.reason}. A person approves it (`warden inbox approve "
                        f"{decision.decision_id}`); then make the same call again",
                        verdict=decision.verdict, approval_id=decision.decision_id)
        if not modern:  # before 2026-07-28 there is no input_required: the approval id is the channel
            return asked
        state = self.states.issue(who, served.run.run_id, decision.decision_id, exposed.upstream, call)
        return types.InputRequiredResult(request_state=state, _meta={"warden": asked.structured_content["warden"]})

    async def _state_approval(self, who: Client, served: _Served, exposed: catalog.Exposed, call: str,
                              state: str) -> ApprovalOutcome | types.CallToolResult:
        """The person's approval a retry's requestState points to, or the refusal. Nothing awaits
        between the checks and the spend, so two retries with one state cannot both pass."""
        refuse = dict(tool=exposed.name, upstream=exposed.upstream)
        try:
            bound = self.states.verify(state, who, served.run.run_id, exposed.upstream, call)
        except StateRefused as exc:
            return await self._refuse(who, served.run, exc.code, exc.reason, **refuse)
        approval = self.inbox.take(bound.approval)
        if approval is None:  # not spent: the client retries with the same state once the person answered
            pending = await self._refuse(who, served.run, codes.APPROVAL_PENDING, "a person has not answered yet "
                                         f"(`warden inbox approve {bound.approval}`): retry with the same "
                                         "requestState once they have", **refuse,
                                         approval_id=bound.approval)
            if pending.structured_content is not None:  # always: a refusal carries its `warden` details
                pending.structured_content["warden"]["request_state"] = state
            return pending
        self.states.spend(bound.approval, bound.expires)
        served.waiting.pop(call, None)
        if not approval.approved:
            return await self._refuse(who, served.run, codes.APPROVAL_REJECTED, "a person rejected this call",
                                      **refuse, approval_id=approval.decision_id)
        return approval  # the checkpoint honours its token only as a person's, for this run and call

    async def _forward(self, who: Client, run: Run, exposed: catalog.Exposed,
                       arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            result = await self.upstreams.call(exposed.upstream, exposed.upstream_name, arguments)
        except Exception as exc:  # noqa: BLE001 - the upstream's failure is the client's error result
            run.report_result(False)
            return await self._refuse(who, run, codes.UPSTREAM_UNAVAILABLE, f"upstream {exposed.upstream!r}: "
                                      f"{type(exc).__name__}: {exc}", tool=exposed.name, upstream=exposed.upstream)
        if why := too_large(result, self.settings.max_result_bytes):
            run.report_result(False)
            return await self._refuse(who, run, codes.RESULT_TOO_LARGE, why, tool=exposed.name,
                                      upstream=exposed.upstream)
        clean, _masked = scrubbed(result, self.settings.max_result_bytes)
        run.report_result(not clean.is_error)
        return clean


def _claimed_approval(params: types.CallToolRequestParams) -> str:
    """What in a call claims to answer for a person ("" when nothing does): input responses (the
    gateway sends no input requests, so any answer is the client's own), or a `_meta` key naming an
    approval."""
    if params.input_responses:
        return "the call carries the client's own input responses"
    meta = params.meta or {}
    if any("approv" in str(key).lower() for key in meta):
        return "the call's _meta claims an approval"
    return ""
