"""Building the record of one Check: the run it is filed under, who acted, and what the log keeps
of the action's inputs (masked by the tool's `audit` section). Pure: the service appends it."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from checkpoint.audit import mask_arguments
from checkpoint.audit.record import CanonicalJson, DecisionRecord, format_time_ns
from checkpoint.policy import PolicySet
from checkpoint.server import convert
from checkpoint.server.ids import new_decision_id
from checkpoint.server.runs import Established
from warden import canonical
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.structs import struct_to_dict

MAX_LOGGED_ARGUMENT_BYTES = 64 * 1024  # the engine refuses larger arguments; the log keeps their hash

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY


def check_record(
    request: pb.CheckRequest,
    response: pb.CheckResponse,
    action: str | None,
    arguments: dict[str, Any] | None,
    policies: PolicySet | None,
    now_ns: int,
    mask_key: bytes | None,
    established: Established | None = None,
    signed_text: CanonicalJson | None = None,
) -> DecisionRecord:
    """`established`: the run the request's token established (its run context is the token's
    by now), whose chain is encoded once per run; `signed_text`: the arguments' canonical text
    when a grant hashed them."""
    run = request.run
    logged_chain: Any
    if established is not None:
        chain, logged_chain = established.logged_chain()
    else:
        chain = logged_chain = convert.actor_chain(run.actor_chain)
    person = next((a["id"] for a in chain if a["kind"] == "person"), None)
    last = chain[-1] if chain and chain[-1].get("kind") == "agent" else {}
    tool = request.tool_call.tool if action == "tool_call" else None
    return DecisionRecord(
        decision_id=response.decision_id or new_decision_id(),
        time=format_time_ns(now_ns),
        tenant=response.tenant or run.tenant or None,
        run_id=run.run_id or None,
        root_run_id=run.root_run_id or run.run_id or None,  # a run that names no root is its own
        parent_run_id=run.parent_run_id or None,
        actor_chain=logged_chain,
        accountable_person=response.accountable_person or person,
        agent=response.agent or last.get("id") or None,
        agent_version=response.agent_version or last.get("agent_version") or None,
        action=action,
        tool=tool or None,
        arguments=logged_arguments(request, response, action, arguments, policies, mask_key, signed_text),
        verdict=convert.verdict_name(response.verdict),
        code=response.code,
        rule=response.rule or None,
        reason=response.reason or None,
        policy_revision=response.policy_revision or None,
    )


def refused_request(request: Any) -> pb.CheckRequest:
    """What a refusal before any decision is filed as: a plan's request as the Check it stands
    for, anything else that is not a CheckRequest (bytes that did not parse) as an empty one."""
    if isinstance(request, pb.CheckPlanRequest):
        return pb.CheckRequest(run=request.run, plan=request.plan, counters=request.counters)
    if not isinstance(request, pb.CheckRequest):
        return pb.CheckRequest()
    return request


def tool_arguments(request: pb.CheckRequest, action: str | None) -> dict[str, Any] | None:
    """A tool call's arguments as plain values, else None (unchecked: the decision refused what it must)."""
    return struct_to_dict(request.tool_call.arguments, checked=False) if action == "tool_call" else None


def logged_arguments(
    request: pb.CheckRequest,
    response: pb.CheckResponse,
    action: str | None,
    arguments: dict[str, Any] | None,
    policies: PolicySet | None,
    mask_key: bytes | None = None,
    signed_text: CanonicalJson | None = None,
) -> dict[str, Any] | CanonicalJson | None:
    """What the log keeps of the action's inputs, masked by the tool's `audit` section.

    A call to a tool the policy does not know has no masking rules to apply, so only the hash
    of its arguments is kept: enough to match it against other evidence, nothing that could be
    a secret. Arguments over the size cap are kept as their hash too, and arguments with no
    canonical form (NaN) as a note: the decision is recorded whatever the request held.
    """
    if action == "tool_call":
        if arguments is None:
            return None
        tool = policies.tools.get(request.tool_call.tool) if policies is not None else None
        size = request.tool_call.arguments.ByteSize()
        try:
            if tool is None or size > MAX_LOGGED_ARGUMENT_BYTES:
                return {"sha256": canonical.sha256_hex(arguments), "bytes": size}
            if not response.HasField("grant"):  # a grant signed their canonical form already
                canonical.dumps(arguments)  # refuses what the log could not store either
        except (ValueError, TypeError) as exc:
            return {"unrecordable": str(exc)[:200], "bytes": size}
        masking = tool.spec.audit
        if masking.drop or masking.hash:
            return mask_arguments(arguments, drop=masking.drop, hash=masking.hash, key=mask_key)
        return signed_text if signed_text is not None else arguments
    if action == "model_call":
        m = request.model_call
        return {
            "provider": m.provider,
            "model": m.model,
            "max_tokens": m.max_tokens,
            "input_tokens": m.input_tokens,
        }
    if action == "delegation":
        d = request.delegation
        # narrowing, budget and the version the child would run: an approval of one delegation
        # must not pass a wider one, nor one whose agent was widened by a policy edit meanwhile
        return {
            "agent": d.agent,
            "agent_version": d.agent_version,
            "child_agent_version": response.child_agent_version,
            "narrowing": json_format.MessageToDict(d.narrowing, preserving_proto_field_name=True),
            "budget": json_format.MessageToDict(d.budget, preserving_proto_field_name=True),
        }
    if action == "plan":
        # each refused step keeps its own code and reason (an off-limits subject among them), so
        # the refusal is found by that code and subject like a refused call (docs/audit.md)
        results = {r.index: r for r in response.plan_steps}
        steps = []
        for i, s in enumerate(request.plan.steps):
            step: dict[str, Any] = {"id": s.id, "tool": s.tool}
            result = results.get(i)
            if result is not None and result.verdict != ALLOW:
                step.update(verdict=convert.verdict_name(result.verdict), code=result.code,
                            reason=result.reason[:500])
            steps.append(step)
        return {"steps": steps}
    return None
