"""gRPC clients of the checkpoint and the toolrunner, with one place that maps their failures.

An unreachable peer (UNAVAILABLE, DEADLINE_EXCEEDED) becomes `DependencyUnavailable` with the
stable code `checkpoint_unavailable` / `toolrunner_unavailable`: the loop pauses the run and no
tool runs (fail closed). Any other gRPC error keeps the code the peer put in its ErrorDetail (the
standard status details; both peers send one), or else in the `warden-code` trailer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from driver.errors import DependencyUnavailable, DriverError
from warden import tracing
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.checkpoint.v1 import checkpoint_pb2_grpc as cp_grpc
from warden.client.failures import classify
from warden.token_keys import load_public_pem
from warden.toolrunner.v1 import toolrunner_pb2 as tr
from warden.toolrunner.v1 import toolrunner_pb2_grpc as tr_grpc

CHECKPOINT_SERVICE = cp.DESCRIPTOR.services_by_name["CheckpointService"].full_name
TOOLRUNNER_SERVICE = tr.DESCRIPTOR.services_by_name["ToolRunnerService"].full_name


def _map(err: grpc.RpcError, who: str) -> DriverError:
    unavailable, code, message = classify(err, who)
    return (DependencyUnavailable if unavailable else DriverError)(message, code=code)


class _Client:
    """A channel to one peer; every unary call's gRPC failure is mapped by `_map`."""

    def __init__(self, who: str, address: str, stub: Callable[[grpc.Channel], Any], service: str,
                 token: str | None, timeout: float) -> None:
        self.address = address
        self._who = who
        self._service = service
        self._channel = grpc.insecure_channel(address)
        self._stub = stub(self._channel)
        self._md = [("authorization", f"Bearer {token}")] if token else []
        self.timeout = timeout

    def _call(self, name: str, request: Any, timeout: float | None = None) -> Any:
        """One unary call of method `name`; `traceparent` goes with it whenever tracing is on."""
        with tracing.client_call(f"{self._service}/{name}") as trace_md:
            try:
                return getattr(self._stub, name)(request, timeout=self.timeout if timeout is None else timeout,
                                                 metadata=self._md + trace_md)
            except grpc.RpcError as err:
                raise _map(err, self._who) from None

    def close(self) -> None:
        self._channel.close()


class CheckpointClient(_Client):
    def __init__(self, address: str, *, token: str | None = None, timeout: float = 10.0) -> None:
        super().__init__("checkpoint", address, cp_grpc.CheckpointServiceStub, CHECKPOINT_SERVICE, token, timeout)

    def check(self, request: cp.CheckRequest) -> cp.CheckResponse:
        return self._call("Check", request)

    def check_plan(self, request: cp.CheckPlanRequest) -> cp.CheckResponse:
        return self._call("CheckPlan", request).decision

    def resolve_agent(self, agent: str, version: str = "") -> cp.ResolveAgentResponse:
        return self._call("ResolveAgent", cp.ResolveAgentRequest(agent=agent, agent_version=version))

    def start_run(self, request: cp.StartRunRequest) -> cp.StartRunResponse:
        return self._call("StartRun", request)

    def record_act(self, request: cp.RecordActRequest) -> cp.CheckResponse:
        return self.record_act_answer(request).decision

    def record_act_answer(self, request: cp.RecordActRequest) -> cp.RecordActResponse:
        """The whole answer: a recorded resume carries the run's renewed token."""
        return self._call("RecordAct", request)

    def token_keys(self) -> dict[str, Ed25519PublicKey]:
        """The checkpoint's published set of token-verifying public keys, by key id."""
        got = self._call("TokenKeys", cp.TokenKeysRequest())
        return {k.key_id: load_public_pem(k.public_key_pem) for k in got.keys if k.algorithm == "Ed25519"}

    def propose_agent_change(self, request: cp.ProposeAgentChangeRequest) -> cp.CatalogActResponse:
        return self._call("ProposeAgentChange", request)

    # skills and templates (docs/skills.md)
    def run_skills(self, run_token: str) -> cp.RunSkillsResponse:
        return self._call("RunSkills", cp.RunSkillsRequest(run=cp.RunContext(run_token=run_token)))

    def load_skill(self, request: cp.LoadSkillRequest) -> cp.LoadSkillResponse:
        return self._call("LoadSkill", request)

    def propose_catalog_entry(self, request: cp.ProposeCatalogEntryRequest) -> cp.CatalogEntryActResponse:
        return self._call("ProposeCatalogEntry", request)

    def roles(self, person: str) -> dict[str, frozenset[str]]:
        """tenant -> the roles the checkpoint says `person` holds there (tenants with none left out)."""
        answer = self._call("Roles", cp.RolesRequest(person=person))
        return {t.tenant: frozenset(t.roles) for t in answer.tenants}

    # learnings (docs/learnings.md): a run's proposals and the lessons about its agent
    def propose_learning(self, request: cp.ProposeLearningRequest) -> cp.LearningActResponse:
        return self._call("ProposeLearning", request)

    def run_lessons(self, run: cp.RunContext) -> list[cp.LearningInfo]:
        return list(self._call("RunLessons", cp.RunLessonsRequest(run=run)).lessons)

    # a person's own acts, made with the person's own checkpoint credential (never the driver's)
    def approve(self, run_id: str, decision_id: str, note: str = "") -> cp.ApproveResponse:
        return self._call("Approve", cp.ApproveRequest(run_id=run_id, decision_id=decision_id, note=note))

    def reject(self, run_id: str, decision_id: str, note: str = "") -> cp.RejectResponse:
        return self._call("Reject", cp.RejectRequest(run_id=run_id, decision_id=decision_id, note=note))


class ToolRunnerClient(_Client):
    def __init__(self, address: str, *, token: str | None = None, timeout: float = 600.0) -> None:
        super().__init__("toolrunner", address, tr_grpc.ToolRunnerServiceStub, TOOLRUNNER_SERVICE, token, timeout)

    def execute(self, request: tr.ExecuteRequest,
                on_output: Callable[[str, str], None] | None = None) -> tr.Receipt:
        """Run a granted call and return its receipt. With `on_output(stream, text)`, the scrubbed
        output arrives while the tool writes it (ExecuteStream); without, one Execute."""
        if on_output is None:
            return self._call("Execute", request).receipt
        with tracing.client_call(f"{self._service}/ExecuteStream") as trace_md:
            receipt = None
            try:
                for event in self._stub.ExecuteStream(request, timeout=self.timeout, metadata=self._md + trace_md):
                    if event.HasField("receipt"):
                        # read on to the stream's end (it ends with the receipt): a call left behind
                        # here is cancelled, and the toolrunner would count every tool call CANCELLED
                        receipt = event.receipt
                        continue
                    on_output(event.chunk.stream, event.chunk.data)
            except grpc.RpcError as err:
                if receipt is None:
                    raise _map(err, "toolrunner") from None
            if receipt is not None:
                return receipt
        # The call may still have run: the same grant, sent again, answers with its stored receipt.
        raise DependencyUnavailable("toolrunner: the output stream ended without a receipt",
                                    code="toolrunner_unavailable")

    def cancel(self, run_id: str) -> int:
        return self._call("Cancel", tr.CancelRequest(run_id=run_id), timeout=10).cancelled
