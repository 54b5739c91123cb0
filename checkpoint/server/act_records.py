"""The record of an answer that is not a Check: one typed record per kind of act (a run started, a
run acted on, a person's approval, a catalog act, a skill loaded, a learning act), each stamped
with its decision id and time and turned into what the log takes by one path, `to_dict`."""

from __future__ import annotations

import time
from dataclasses import dataclass, fields
from typing import Any, Self

from checkpoint.audit.record import format_time_ns
from checkpoint.policy.policyset import PolicySet
from checkpoint.policy.principals import Principal
from checkpoint.server import convert
from checkpoint.server.ids import new_decision_id
from warden import canonical
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def stamp(response: pb.CheckResponse) -> str:
    """Give an answer its decision id and time; the time as the record writes it."""
    now_ns = time.time_ns()
    response.decision_id = new_decision_id()
    convert.timestamp_from_ns(now_ns, response.decided_at)
    return format_time_ns(now_ns)


@dataclass(slots=True, kw_only=True)
class ActRecord:
    """What the record of every act holds: the answer, its time, and who asked. Each kind of act
    below adds its own fields, in the order its record has always had them; `to_dict` is the one
    way any of them becomes what the decision log takes."""

    decision_id: str
    time: str
    verdict: str
    code: str
    rule: str | None
    reason: str
    policy_revision: str
    caller: str | None
    principal: str | None

    @classmethod
    def answering(cls, response: pb.CheckResponse, stamped: str, policies: PolicySet, caller: str | None,
                  principal: Principal | None, **fields: Any) -> Self:
        """The record of `response`, stamped at `stamped`; `fields` are the act's own (and may say
        another `rule` than the answer's)."""
        return cls(**{
            "decision_id": response.decision_id,
            "time": stamped,
            "verdict": convert.verdict_name(response.verdict),
            "code": response.code,
            "rule": response.rule,
            "reason": response.reason,
            "policy_revision": policies.revision,
            "caller": caller,
            "principal": principal.name if principal is not None else None,
            **fields,
        })

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True, kw_only=True)
class RunStarted(ActRecord):
    """StartRun: a run begun (or refused) for a person and an agent."""

    tenant: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    action: str = "start_run"
    arguments: dict[str, Any] | None = None
    latency_us: int | None = None


@dataclass(slots=True, kw_only=True)
class RunActedOn(ActRecord):
    """RecordAct: a person's pause, resume, amend or cancel of a run, or the run's own end."""

    tenant: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    action: str = "none"
    tool: str | None = None  # a gateway's refusal: the tool it refused
    arguments: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class PersonsApproval(ActRecord):
    """Approve or Reject: a person's answer to a REQUIRE_APPROVAL decision, filed under its run."""

    tenant: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    action: str = "approval"
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    call_digest: str | None = None
    approval_rules: str | None = None
    approver: str | None = None


@dataclass(slots=True, kw_only=True)
class CatalogAct(ActRecord):
    """A change to the agent catalog, or to a skill or template: proposed, reviewed, retired, or
    applied from the policy files."""

    tenant: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    action: str = "catalog"
    arguments: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class SkillLoaded(ActRecord):
    """LoadSkill: a run read one of the skills it pinned."""

    tenant: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    action: str = "load_skill"
    arguments: dict[str, Any] | None = None


@dataclass(slots=True, kw_only=True)
class LearningAct(ActRecord):
    """A learning proposed (by a person, an agent or a breaker), reviewed, or retired."""

    tenant: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: list[dict[str, Any]] | None = None
    accountable_person: str | None = None
    action: str = "learning"
    arguments: dict[str, Any] | None = None


MAX_ACT_DETAILS_BYTES = 4096


def bounded_details(details: dict[str, Any]) -> dict[str, Any]:
    """An act's details as recorded: whole when small (what was raised, the goal version), else
    their hash and size, so no caller can make one record (and the log) as large as a request."""
    try:
        size = len(canonical.dumps(details))
    except (ValueError, TypeError) as exc:
        return {"unrecordable": str(exc)[:200]}
    return details if size <= MAX_ACT_DETAILS_BYTES else {"sha256": canonical.sha256_hex(details), "bytes": size}


def forget_claimed_run(request: Any) -> str:
    """Drop a run context nobody vouched for, so a refusal is never filed under another run's id
    (a caller could otherwise write DENY records into any run's history); the claim stays in the
    reason, capped."""
    run = getattr(request, "run", None)
    if run is None or not request.HasField("run"):
        return ""
    claimed = run.run_id
    request.ClearField("run")
    return f" (the request claimed run {claimed[:64]!r})" if claimed else ""
