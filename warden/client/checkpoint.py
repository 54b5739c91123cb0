"""The checkpoint client: start a run, check a call, relay an approval, end a run.

Sync, over one gRPC channel. A checkpoint that cannot be reached or cannot record raises
`CheckpointUnavailable`: callers refuse the call then, they never let it through.
"""

from __future__ import annotations

from typing import Any

import grpc

from warden import tracing
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.checkpoint.v1 import checkpoint_pb2_grpc as cp_grpc
from warden.client.approvals import ApprovalInbox, ApprovalOutcome
from warden.client.failures import ClientError, client_error
from warden.client.runs import VERDICTS, Decision, Run
from warden.client.stream import CheckStream
from warden.structs import struct_to_dict, to_struct

SERVICE = cp.DESCRIPTOR.services_by_name["CheckpointService"].full_name
MODES = {"interactive": cp.RUN_MODE_INTERACTIVE, "background": cp.RUN_MODE_BACKGROUND}


class CheckpointClient:
    """One caller's connection to the checkpoint, authenticated by its bearer token."""

    def __init__(self, address: str, *, token: str | None = None, timeout: float = 10.0,
                 stream: bool = False) -> None:
        """`stream`: checks go over one CheckStream held open (a gateway's many calls), not one
        Check each."""
        self.address = address
        self.timeout = timeout
        self._channel = grpc.insecure_channel(address)
        self._stub = cp_grpc.CheckpointServiceStub(self._channel)
        self._md = [("authorization", f"Bearer {token}")] if token else []
        self._stream = CheckStream(self._stub, self._md, timeout) if stream else None

    def __enter__(self) -> CheckpointClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
        self._channel.close()

    def _call(self, name: str, request: Any) -> Any:
        with tracing.client_call(f"{SERVICE}/{name}") as trace_md:
            try:
                return getattr(self._stub, name)(request, timeout=self.timeout, metadata=self._md + trace_md)
            except grpc.RpcError as err:
                raise client_error(err) from None

    def start_run(self, *, person: str, agent: str = "", tenant: str = "", agent_version: str = "",
                  mode: str = "interactive", inputs: dict[str, Any] | None = None) -> Run:
        """A recorded StartRun for `person`; a refusal raises ClientError with the checkpoint's code."""
        request = cp.StartRunRequest(person=person, agent=agent, tenant=tenant, agent_version=agent_version,
                                     mode=MODES[mode])
        if inputs:
            request.inputs.CopyFrom(to_struct(inputs))
        got = self._call("StartRun", request)
        if got.decision.verdict != cp.VERDICT_ALLOW or not got.run_token:
            raise ClientError(f"the run was not started: {got.decision.reason}", code=got.decision.code or "denied")
        return Run(run_id=got.run_id, token=got.run_token, agent=got.agent.agent,
                   agent_version=got.agent.agent_version, tenant=got.agent.tenant or got.decision.tenant,
                   tools=tuple(got.agent.tools))

    def tool_call(self, run: Run, tool: str, arguments: dict[str, Any], *,
                  approval: ApprovalOutcome | None = None) -> cp.CheckRequest:
        request = cp.CheckRequest(run=cp.RunContext(run_token=run.token),
                                  tool_call=cp.ToolCall(tool=tool, arguments=to_struct(arguments)),
                                  counters=run.counters(tool, arguments))
        if approval is not None:
            request.approval.CopyFrom(cp.Approval(decision_id=approval.decision_id, token=approval.token))
        return request

    def check(self, run: Run, tool: str, arguments: dict[str, Any], *,
              approval: ApprovalOutcome | None = None) -> Decision:
        """Decide one tool call with its final arguments. An allowed call counts as made."""
        request = self.tool_call(run, tool, arguments, approval=approval)
        answer = self._stream.check(request) if self._stream is not None else self._call("Check", request)
        decision = Decision.of(answer)
        if decision.allowed:
            run.made_call(tool, arguments)
        else:
            run.report_result(False)  # a refused call is a failure in a row, as the driver counts it
        return decision

    def report_result(self, run: Run, *, ok: bool) -> None:
        """The allowed call ran and succeeded (or failed): the run's failure breaker reads it."""
        run.report_result(ok)

    def end_run(self, run: Run, *, status: str = "succeeded", code: str = "") -> Decision:
        """Record the run's end (act "end"): later Checks of it are refused `run_ended`."""
        details = to_struct({"status": status, "code": code or status})
        got = self._call("RecordAct", cp.RecordActRequest(run=cp.RunContext(run_token=run.token), act="end",
                                                          details=details))
        return Decision.of(got.decision)

    def record_gateway(self, run: Run, details: dict[str, Any]) -> Decision:
        """Put an MCP gateway's own decision on the checkpoint's log (act "gateway", docs/mcp.md):
        a tools/list it filtered, or a call it refused. Raises ClientError when it is not recorded,
        so the caller can refuse what it cannot record."""
        got = self._call("RecordAct", cp.RecordActRequest(run=cp.RunContext(run_token=run.token), act="gateway",
                                                          details=to_struct(details)))
        decision = Decision.of(got.decision)
        recorded = (decision.rule == "gateway" and decision.code == details.get("code")
                    if details.get("event") == "refused" else decision.allowed)
        if not recorded or not decision.decision_id:
            raise ClientError(f"the gateway's act was not recorded: {decision.reason}", code=decision.code)
        return decision

    # a person's acts, made with the person's own credential (never an agent's)
    def approve(self, run_id: str, decision_id: str, note: str = "") -> ApprovalOutcome:
        got = self._call("Approve", cp.ApproveRequest(run_id=run_id, decision_id=decision_id, note=note))
        if got.decision.verdict != cp.VERDICT_ALLOW or not got.approval_token:
            raise ClientError(f"the approval was refused: {got.decision.reason}", code=got.decision.code or "denied")
        return ApprovalOutcome(decision_id, run_id, True, got.approval_token, got.decision.decision_id)

    def reject(self, run_id: str, decision_id: str, note: str = "") -> ApprovalOutcome:
        got = self._call("Reject", cp.RejectRequest(run_id=run_id, decision_id=decision_id, note=note))
        if got.decision.verdict != cp.VERDICT_ALLOW:
            raise ClientError(f"the rejection was refused: {got.decision.reason}", code=got.decision.code or "denied")
        return ApprovalOutcome(decision_id, run_id, False, "", got.decision.decision_id)

    def recorded(self, run_id: str, decision_id: str) -> dict[str, Any] | None:
        """The decision as the checkpoint's log holds it (the tool, the arguments as recorded, the
        verdict), read with a credential that may audit the run's tenant; None when it is not there."""
        request = cp.WatchDecisionsRequest(run_id=run_id, no_follow=True)
        try:
            for answer in self._stub.WatchDecisions(request, timeout=self.timeout, metadata=self._md):
                record = answer.record
                if record.decision_id == decision_id:
                    return {"tool": record.tool, "verdict": VERDICTS.get(record.verdict, "DENY"), "code": record.code,
                            "arguments": struct_to_dict(record.arguments, checked=False), "run_id": record.run_id}
        except grpc.RpcError as err:
            raise client_error(err) from None
        return None

    def wait_for_approval(self, inbox: ApprovalInbox, decision: Decision, timeout: float) -> ApprovalOutcome | None:
        """The person's answer to a REQUIRE_APPROVAL decision, once their command relayed it."""
        return inbox.wait(decision.decision_id, timeout)
