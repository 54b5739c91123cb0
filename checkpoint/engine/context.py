"""Who is acting, under which pinned version, inside which chain.

The request names versions; the checkpoint never takes an allowlist or scope from the request.
It looks every agent of the chain up among the versions the server read from its own catalog
before the decision (policy/pinned.py): nothing here reads the catalog itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from checkpoint.engine.outcome import DENY, HALT, InvalidRequest, Trace
from checkpoint.policy import AgentVersion, PolicySet
from checkpoint.policy.limits import NOTHING as NO_USAGE
from checkpoint.policy.limits import LimitUsage
from checkpoint.policy.model import Tenant
from checkpoint.policy.pinned import NOTHING, PinnedVersions
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.structs import struct_to_dict

MODES = {pb.RUN_MODE_INTERACTIVE: "interactive", pb.RUN_MODE_BACKGROUND: "background"}


@dataclass(slots=True)
class Link:
    """One agent of the chain: its pinned version, the narrowing it received, its run's budget."""

    agent: AgentVersion
    narrowing: pb.Scope | None
    budget: pb.Budget | None


@dataclass(slots=True)
class Call:
    policies: PolicySet
    request: pb.CheckRequest
    trace: Trace
    person: str
    links: list[Link]  # root agent first, the acting agent last; empty when a person acts
    tenant: Tenant
    mode: str
    agent: AgentVersion | None  # the acting agent (the last link); None when a person acts
    approver: str = ""  # a verified approval of this call is at hand (the service checked it)
    approved_rules: frozenset[str] = frozenset()  # the approve-if rules (names) that approval answered
    approved_by: str = ""  # set when that approval satisfied every approve_if rule that applied
    asking: list[str] = field(default_factory=list)  # approve-if rules left to answer (REQUIRE_APPROVAL)
    handoff_to: str = ""  # set when a handoff_if rule handed the case to a person or queue
    now: datetime | None = None  # the checkpoint's time for rules that read `now` (decide() sets it)
    pinned: PinnedVersions = NOTHING  # the versions the request names, read from the catalog beforehand
    limits: LimitUsage = NO_USAGE  # the counts of the limits across runs, read from their store beforehand

    @property
    def depth(self) -> int:
        """Delegation depth of the acting agent: 0 for a run a person started."""
        return max(len(self.links) - 1, 0)

    def run_map(self) -> dict[str, Any]:
        run = self.request.run
        return {
            "tenant": self.tenant.name,
            "run_id": run.run_id,
            "root_run_id": run.root_run_id or run.run_id,
            "parent_run_id": run.parent_run_id,
            "mode": self.mode,
            "depth": self.depth,
            "accountable_person": self.person,
            "has_plan": run.has_plan,
            "inputs": struct_to_dict(run.inputs) if run.HasField("inputs") else {},
        }


def resolve(policies: PolicySet, request: pb.CheckRequest, trace: Trace, pinned: PinnedVersions = NOTHING) -> Call:
    """Check the request's shape and resolve the chain against the policy set and `pinned` (the
    versions the request names, loaded beforehand); raise InvalidRequest or a DENY Stop."""
    if not request.HasField("run"):
        raise InvalidRequest(codes.INVALID_REQUEST, "the request has no run context", "run")
    if request.WhichOneof("action") is None:
        raise InvalidRequest(codes.INVALID_REQUEST, "the request proposes no action", "action")
    run = request.run
    _finite(request)
    chain = run.actor_chain
    if not chain or chain[0].kind != pb.ACTOR_KIND_PERSON or not chain[0].id:
        raise InvalidRequest(
            codes.INVALID_REQUEST,
            "run.actor_chain must start with the accountable person (kind PERSON, with an id)",
            "run.actor_chain",
        )
    if run.mode not in MODES:
        raise InvalidRequest(codes.INVALID_REQUEST, "run.mode must be RUN_MODE_INTERACTIVE or RUN_MODE_BACKGROUND", "run.mode")
    links = []
    for i in range(1, len(chain)):
        actor = chain[i]
        if actor.kind == pb.ACTOR_KIND_PERSON:
            raise InvalidRequest(
                codes.INVALID_REQUEST, "only the first actor of the chain may be a person", "run.actor_chain"
            )
        if actor.kind != pb.ACTOR_KIND_AGENT or not actor.id or not actor.agent_version:
            raise InvalidRequest(
                codes.INVALID_REQUEST,
                f"run.actor_chain[{i}] must be an agent with an id and its pinned agent_version",
                f"run.actor_chain[{i}]",
            )
        version = pinned.version(policies, actor.id, actor.agent_version)
        if version is None:
            if not pinned.known(policies, actor.id):
                raise trace.stop(DENY, codes.UNKNOWN_AGENT, "request.agent", f"no agent named {actor.id[:100]!r}")
            raise trace.stop(
                DENY,
                codes.UNKNOWN_AGENT_VERSION,
                "request.agent_version",
                f"agent {actor.id[:100]!r} has no version {actor.agent_version[:100]!r} in the catalog",
            )
        links.append(
            Link(
                agent=version,
                narrowing=actor.narrowing if actor.HasField("narrowing") else None,
                budget=actor.budget if actor.HasField("budget") else None,
            )
        )
    # Every link, not only the acting one: a child's authority is its ancestors' intersected, so a
    # run delegated by a retired version holds authority that version granted, and stops with it.
    retired = None
    if policies.retired:  # usually empty: no loop on the common path
        retired = next((link.agent for link in reversed(links)
                        if (link.agent.name, link.agent.version) in policies.retired), None)
    if retired is not None:
        acting = links[-1].agent
        whose = "" if retired is acting else f", which this run's chain delegates from (acting: {acting.name!r})"
        raise trace.stop(HALT, codes.AGENT_VERSION_RETIRED, "request.agent_version",
                         f"version {retired.version} of agent {retired.name!r} was retired{whose}: this run stops")
    tenant_name = links[-1].agent.tenant if links else run.tenant
    if run.tenant and run.tenant != tenant_name:
        raise trace.stop(
            DENY,
            codes.INVALID_REQUEST,
            "request.tenant",
            f"run.tenant {run.tenant[:100]!r} is not the agent's tenant {tenant_name!r}",
        )
    tenant = policies.tenants.get(tenant_name or "default")
    if tenant is None:
        raise trace.stop(DENY, codes.INVALID_REQUEST, "request.tenant", f"unknown tenant {tenant_name[:100]!r}")
    trace.add("request.shape", "pass")
    return Call(policies, request, trace, chain[0].id, links, tenant, MODES[run.mode],
                links[-1].agent if links else None, pinned=pinned)


def _finite(request: pb.CheckRequest) -> None:
    """Counters and budgets are finite and not negative: a NaN compares false with every ceiling,
    so it would switch a breaker off, and a negative counter would buy headroom."""
    run = request.run
    if request.HasField("counters"):
        _finite_fields("counters", request.counters)
    if run.HasField("budget"):
        _finite_fields("run.budget", run.budget)
    for i, actor in enumerate(run.actor_chain):
        if actor.HasField("budget"):
            _finite_fields(f"run.actor_chain[{i}].budget", actor.budget)
    if request.WhichOneof("action") == "delegation" and request.delegation.HasField("budget"):
        _finite_fields("delegation.budget", request.delegation.budget)


def _finite_fields(where: str, message: Any) -> None:
    for descriptor, value in message.ListFields():  # set fields only: proto3 zeros are fine
        if not (value >= 0 and math.isfinite(value)):  # NaN fails both
            raise InvalidRequest(
                codes.INVALID_REQUEST,
                f"{where}.{descriptor.name} must be a finite number that is not negative, not {value!r}",
                f"{where}.{descriptor.name}",
            )
