"""The CheckRequest a record was decided on, rebuilt as exactly as the log allows, or the reason it
cannot be (never a guess)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import json_format

from checkpoint.policy import PolicySet
from checkpoint.replay.report import Versions
from warden.checkpoint.v1 import checkpoint_pb2 as pb

# rules of refusals the decision function does not make (the service, the log, the grant)
# (the decision function's own start `request.`, `roles`: those are replayed)
_OUTSIDE = frozenset({"principal", "run_token", "request", "audit", "engine", "grant", "skill", "act"})
_OUTSIDE_PREFIXES = ("role:", "catalog", "start_run")
_APPROVED_BY = re.compile(r"^approved by (.{1,100}?) \(decision")
_KINDS = {"person": pb.ACTOR_KIND_PERSON, "agent": pb.ACTOR_KIND_AGENT}
_MODES = {"interactive": pb.RUN_MODE_INTERACTIVE, "background": pb.RUN_MODE_BACKGROUND}


@dataclass
class RunFacts:
    """What other records say about a decision's run: its mode and inputs, approvals answered."""

    modes: dict[str, str] = field(default_factory=dict)  # run id -> interactive/background
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    asked: dict[str, list[str]] = field(default_factory=dict)  # call digest -> approve-if rules
    contexts: dict[tuple[Any, ...], Any] = field(default_factory=dict)  # built run contexts (or why not)

    def learn(self, record: dict[str, Any]) -> None:
        action = record.get("action")
        if action == "start_run" and record.get("verdict") == "ALLOW" and record.get("run_id"):
            args = record.get("arguments") or {}
            self.modes[record["run_id"]] = args.get("mode", "")
            if args.get("inputs"):
                self.inputs[record["run_id"]] = args["inputs"]
        elif record.get("verdict") == "REQUIRE_APPROVAL" and record.get("call_digest") and record.get("approval_rules"):
            self.asked[record["call_digest"]] = record["approval_rules"].split(",")


class NotReplayable(Exception):  # noqa: N818 - a reason, not an error
    pass


def rebuild(record: dict[str, Any], policies: PolicySet, facts: RunFacts, versions: Versions) -> pb.CheckRequest:
    """The CheckRequest a record was decided on, as exactly as the log allows; NotReplayable
    (with the reason) when it cannot be rebuilt."""
    action = record["action"]
    rule = record.get("rule") or ""
    if rule.startswith("breaker."):
        raise NotReplayable("decided by a breaker over counters the log does not keep")
    if rule.startswith("learning:"):
        raise NotReplayable("decided by a learning (the learning store's data, not the policy files)")
    if rule in _OUTSIDE or rule.startswith(_OUTSIDE_PREFIXES):
        raise NotReplayable(f"refused outside the policy rules ({rule.split('.')[0]})")
    request = pb.CheckRequest(run=_run_context(record, policies, facts, versions))
    args = record.get("arguments")
    if action == "tool_call":
        tool = record.get("tool") or ""
        if not isinstance(args, dict):
            raise NotReplayable("the arguments were not recorded")
        if "sha256" in args and "bytes" in args or "unrecordable" in args:
            raise NotReplayable("the arguments were kept only as a hash (unknown tool or over the size cap)")
        spec = policies.tools.get(tool)
        if spec is not None and (spec.spec.audit.drop or spec.spec.audit.hash):
            raise NotReplayable("the tool's arguments are masked in the log (its audit section)")
        request.tool_call.tool = tool
        try:
            request.tool_call.arguments.update(args)
        except (TypeError, ValueError) as exc:
            raise NotReplayable(f"the arguments do not convert back: {exc}") from None
    elif action == "model_call":
        json_format.ParseDict(args or {}, request.model_call)
    else:  # delegation
        d = args or {}
        request.delegation.agent = d.get("agent", "")
        if d.get("agent_version"):
            request.delegation.agent_version = _version(policies, d.get("agent", ""), d["agent_version"], versions)
        json_format.ParseDict(d.get("narrowing") or {}, request.delegation.narrowing)
        json_format.ParseDict(d.get("budget") or {}, request.delegation.budget)
    return request


def _run_context(record: dict[str, Any], policies: PolicySet, facts: RunFacts, versions: Versions) -> pb.RunContext:
    """The run context of a record, built once per run, chain and policy set (a run's records share it)."""
    chain = record.get("actor_chain") or []
    key = (id(policies), versions, record.get("run_id"), record.get("root_run_id"), record.get("parent_run_id"),
           record.get("tenant"), tuple((a.get("kind"), a.get("id"), a.get("agent_version"), a.get("run_id"))
                                       for a in chain))
    found = facts.contexts.get(key)
    if found is not None:
        if isinstance(found, NotReplayable):
            raise found
        return found
    try:
        found = _build_run_context(record, chain, policies, facts, versions)
    except NotReplayable as reason:
        found = reason
        raise
    finally:
        if len(facts.contexts) >= 10_000:
            facts.contexts.clear()
        facts.contexts[key] = found
    return found


def _build_run_context(record: dict[str, Any], chain: list[dict[str, Any]], policies: PolicySet, facts: RunFacts,
                       versions: Versions) -> pb.RunContext:
    root = record.get("root_run_id") or record.get("run_id") or ""
    mode = facts.modes.get(root)
    if mode not in _MODES:
        raise NotReplayable("the run's mode is not known (its start_run record is not in the input)")
    run = pb.RunContext(run_id=record.get("run_id") or "", root_run_id=root, parent_run_id=record.get("parent_run_id") or "",
                        tenant=record.get("tenant") or "", mode=_MODES[mode])  # type: ignore[arg-type]
    if root in facts.inputs:
        run.inputs.update(facts.inputs[root])
    for actor in chain:
        kind = _KINDS.get(actor.get("kind", ""))
        if kind is None:
            raise NotReplayable(f"actor of unknown kind {actor.get('kind')!r}")
        out = run.actor_chain.add(kind=kind, id=actor.get("id", ""), run_id=actor.get("run_id", ""))
        if kind == pb.ACTOR_KIND_AGENT:
            out.agent_version = _version(policies, actor.get("id", ""), actor.get("agent_version", ""), versions)
    return run


def _version(policies: PolicySet, name: str, pinned: str, versions: Versions) -> str:
    if versions == "current":
        agent = policies.agents.get(name)
        return agent.version if agent is not None else pinned  # gone from the candidate: decided so
    if policies.agent_version(name, pinned) is None:
        raise NotReplayable("the pinned agent version is not in the candidate or its catalog (give --data)")
    return pinned


def approval(record: dict[str, Any], facts: RunFacts) -> tuple[str, frozenset[str]]:
    """The approver and the approve-if rules an approved call's approval answered."""
    if record.get("rule") != "approval" or record.get("verdict") != "ALLOW":
        return "", frozenset()
    asked = facts.asked.get(record.get("call_digest") or "")
    if asked is None:
        raise NotReplayable("approved: the REQUIRE_APPROVAL record its approval answered is not in the input")
    match = _APPROVED_BY.match(record.get("reason") or "")
    return (match.group(1) if match else "approver"), frozenset(r.removeprefix("rule:") for r in asked)
