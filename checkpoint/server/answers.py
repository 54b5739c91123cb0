"""Building a Check's answer beyond the decision function: the revision an agent version is bound
to, a delegation's operator, the shadow answer recorded beside the enforced one, and the DENY an
answer becomes when something after the decision fails (fail closed: nothing that widens)."""

from __future__ import annotations

import logging
from typing import Any

from checkpoint.engine import decide
from checkpoint.policy import PolicySet
from checkpoint.policy.limits import NOTHING as NO_USAGE
from checkpoint.policy.limits import LimitUsage
from checkpoint.policy.pinned import load as load_pinned
from checkpoint.policy.principals import Principal
from checkpoint.policy.roles import role_refusal
from checkpoint.server import convert
from checkpoint.server.pins import stricter
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

log = logging.getLogger("warden.checkpoint.service")

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY


def version_bound(policies: PolicySet, run: pb.RunContext) -> str:
    """The revision the acting agent's pinned version was reviewed with, when it is not the
    current files' version of that agent (PolicySet.version_bound); "" otherwise."""
    chain = run.actor_chain
    if not chain or chain[-1].kind != pb.ACTOR_KIND_AGENT:
        return ""
    return policies.version_bound(chain[-1].id, chain[-1].agent_version)


def shadow_answer(policies: PolicySet, request: pb.CheckRequest, approver: str, approved: frozenset[str],
                   now: Any, pinned_answer: pb.CheckResponse | None, revision: str,
                   principal: Principal | None = None, limits: LimitUsage = NO_USAGE) -> tuple[str, str, str]:
    """The answer with the `mode: shadow` rules enforced too: (verdict, code, rule) for the record,
    held to a pinned revision's answer as the enforced one is. It never changes the enforced
    answer: any failure here is recorded as the shadow's own."""
    try:
        shadow = decide(policies.shadow(), request, approver=approver, approved_rules=approved, now=now,
                        pinned=load_pinned(policies, request), limits=limits)
        if pinned_answer is not None:
            shadow = stricter(shadow, pinned_answer, revision)
        if request.WhichOneof("action") == "delegation":
            shadow = delegation_needs_operator(policies, request, shadow, principal)
        return convert.verdict_name(shadow.verdict), shadow.code, shadow.rule
    except Exception as exc:  # noqa: BLE001 - a shadow failure is evidence, not an outage
        log.warning("shadow evaluation failed: %s", exc)
        return "DENY", "policy_error", "engine"


def delegation_needs_operator(policies: PolicySet, request: pb.CheckRequest,
                               response: pb.CheckResponse, principal: Principal | None) -> pb.CheckResponse:
    """A delegation starts a run in the child agent's tenant: like StartRun, it needs the caller's
    principal to be allowed to ask for that agent in that tenant, and the run's accountable person
    to be an operator there (a delegation is no way into another tenant, nor to another agent)."""
    if response.verdict not in (ALLOW, pb.VERDICT_REQUIRE_APPROVAL):
        return response
    child = (policies.agent_version(request.delegation.agent, response.child_agent_version)
             or policies.agents.get(request.delegation.agent))
    tenant = child.tenant if child is not None else request.run.tenant
    agent = child.name if child is not None else request.delegation.agent
    # the child's token is issued to this principal: it must be one StartRun would have given it
    # (else the child's run, recorded as allowed, would hold a token for an agent or tenant the
    # caller was never granted, and its acts would be recorded there)
    if principal is None or not principal.may_check(tenant or "default", agent):
        name = principal.name if principal is not None else None
        return fail_closed(response, codes.CALLER_NOT_PERMITTED,
                            f"principal {name!r} may not start runs of agent {agent[:100]!r} in tenant "
                            f"{(tenant or 'default')[:100]!r}: a delegation starts a run there", rule="principal")
    chain = request.run.actor_chain
    person = chain[0].id if chain and chain[0].kind == pb.ACTOR_KIND_PERSON else ""
    refusal = role_refusal(policies.tenants, tenant or "default", person, "operator")
    if refusal is None:
        return response
    return fail_closed(response, codes.ROLE_REQUIRED, f"{refusal}: a delegation starts a run there",
                        rule="role:operator")


def fail_closed(response: pb.CheckResponse, code: str, reason: str, *, rule: str) -> pb.CheckResponse:
    """The same decision id and context, but DENY, with no grant and nothing that widens."""
    out = pb.CheckResponse(
        decision_id=response.decision_id,
        verdict=DENY,
        code=code,
        rule=rule,
        reason=reason,
        agent=response.agent,
        agent_version=response.agent_version,
        policy_revision=response.policy_revision,
        tenant=response.tenant,
        accountable_person=response.accountable_person,
    )
    if response.HasField("decided_at"):
        out.decided_at.CopyFrom(response.decided_at)
    return out
