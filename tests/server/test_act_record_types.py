"""Each kind of act's typed record comes out as the record that act has always written: the same
stored row and the same hash chain as the dict the act built by hand before (the oracle below is
that builder, kept here as it was), so no verifier or existing log sees a difference."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.audit.record import to_row
from checkpoint.server import convert
from checkpoint.server.act_records import (
    CatalogAct,
    LearningAct,
    PersonsApproval,
    RunActedOn,
    RunStarted,
    SkillLoaded,
)
from warden.checkpoint.v1 import checkpoint_pb2 as pb


class _Policies:
    revision = "rev-7f3a"


def _oracle(response: pb.CheckResponse, stamped: str, policies: Any, caller: str, principal: Any,
            **fields: Any) -> dict[str, Any]:
    """The act record as it was built before the typed records (one shape, fields by keyword)."""
    return {
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
    }


CHAIN = [{"kind": "person", "id": "alice"}, {"kind": "agent", "id": "recon", "agent_version": "3"}]
RUN = {"tenant": "acme", "run_id": "r-1", "root_run_id": "r-0", "parent_run_id": "r-0", "actor_chain": CHAIN,
       "accountable_person": "alice", "agent": "recon", "agent_version": "3"}
# each act as its call site builds it: (type, the fields it passes)
ACTS: list[tuple[type, dict[str, Any]]] = [
    (RunStarted, {"tenant": "acme", "run_id": "r-1", "root_run_id": "r-1", "actor_chain": CHAIN,
                  "accountable_person": "alice", "agent": "recon", "agent_version": "3", "action": "start_run",
                  "arguments": {"mode": "interactive", "inputs": {"ticket": "T-1"}, "skills": {"triage": "2"}},
                  "latency_us": 412}),
    (RunActedOn, {**RUN, "action": "cancel",
                  "arguments": {"person": "alice", "note": "enough", "details": {}}}),
    (PersonsApproval, {**RUN, "action": "approval", "tool": "send_email",
                       "arguments": {"decision_id": "d-0", "note": "ok é 😀"}, "rule": "approval:email",
                       "call_digest": "ab" * 32, "approval_rules": "approval:email", "approver": "carol"}),
    (CatalogAct, {"tenant": "acme", "agent": "recon", "agent_version": "4", "run_id": None, "root_run_id": None,
                  "parent_run_id": None, "actor_chain": None, "accountable_person": None, "action": "catalog",
                  "arguments": {"act": "propose", "version": "4", "widens": ["allowlist"]}}),
    # a change applied from the policy files: the act names no run, and did not pass the run's fields
    (CatalogAct, {"tenant": "acme", "agent": "recon", "agent_version": "5", "action": "catalog",
                  "arguments": {"act": "apply", "version": "5"}}),
    (SkillLoaded, {**RUN, "action": "load_skill", "arguments": {"skill": "triage", "version": "2"}}),
    (LearningAct, {"tenant": "acme", "agent": "recon", "agent_version": "3", "run_id": "r-1", "root_run_id": "r-0",
                   "parent_run_id": "r-0", "actor_chain": CHAIN, "accountable_person": "alice",
                   "action": "learning", "arguments": {"act": "propose", "text": "ask first", "by": "alice"}}),
]


def _response(i: int, verdict: int) -> pb.CheckResponse:
    return pb.CheckResponse(decision_id=f"0190-{i:04d}", verdict=verdict, code="recorded" if verdict else "denied",
                            rule="act", reason=f"the act's words {i}", policy_revision="ignored")


@pytest.mark.parametrize("verdict", [pb.VERDICT_ALLOW, pb.VERDICT_DENY])
@pytest.mark.parametrize("principal", [SimpleNamespace(name="driver"), None], ids=["principal", "none"])
def test_each_typed_act_record_is_the_row_it_always_was(verdict, principal):
    for i, (kind, fields) in enumerate(ACTS):
        response, stamped = _response(i, verdict), "2026-12-05T06:41:23.123456Z"
        before = _oracle(response, stamped, _Policies, "token:driver", principal, **fields)
        after = kind.answering(response, stamped, _Policies, "token:driver", principal, **fields).to_dict()
        assert to_row(after) == to_row(before), kind.__name__
        # the same keys in the same order; a field the call site never passed is there as null
        assert [k for k in after if k in before] == list(before), kind.__name__
        assert all(after[k] is None for k in after if k not in before), kind.__name__


def test_typed_act_records_make_the_same_hash_chain(tmp_path: Path):
    logs = {name: DecisionLog(tmp_path / f"{name}.db") for name in ("before", "after")}
    try:
        for i, (kind, fields) in enumerate(ACTS):
            response, stamped = _response(i, pb.VERDICT_ALLOW), f"2026-12-05T06:41:{i:02d}.000001Z"
            principal = SimpleNamespace(name="people")
            logs["before"].append(_oracle(response, stamped, _Policies, "carol", principal, **fields))
            logs["after"].append(kind.answering(response, stamped, _Policies, "carol", principal, **fields).to_dict())
        before, after = (list(logs[name].read()) for name in ("before", "after"))
        assert len(after) == len(ACTS)
        assert [r["hash"] for r in after] == [r["hash"] for r in before]
        assert after == before
    finally:
        for log in logs.values():
            log.close()


def test_an_act_record_takes_no_field_its_kind_does_not_have():
    response = _response(0, pb.VERDICT_ALLOW)
    with pytest.raises(TypeError):
        RunStarted.answering(response, "2026-12-05T06:41:23.000000Z", _Policies, "c", None, tool="send_email")
