"""A person's approval or rejection of a REQUIRE_APPROVAL answer: authenticated by the approver's
own credential, recorded, and bound to the whole call."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpoint.audit.record import format_time_ns
from checkpoint.policy import PolicySet
from checkpoint.policy.principals import caller_name
from checkpoint.server.act_records import PersonsApproval, stamp
from checkpoint.server.approvals import asked_rules
from checkpoint.server.refusals import no_principal, require_role
from checkpoint.server.runs import Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb

if TYPE_CHECKING:
    from checkpoint.server.approvals import Approvals
    from checkpoint.server.collaborators import PoliciesInForce, Recorder

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY




class ApprovalActs:
    def __init__(self, in_force: PoliciesInForce, recorder: Recorder, approvals: Approvals,
                 policies_of: Callable[[str], PolicySet] | None = None):
        self.in_force = in_force
        self.recorder = recorder
        self.approvals = approvals
        # the policy set of a revision, for the deadline a REQUIRE_APPROVAL was decided with
        self.policies_of = policies_of or (lambda _revision: self.in_force.current())

    def expire(self, run_id: str, details: dict[str, Any]) -> dict[str, Any]:
        """RecordAct `expire`: the REQUIRE_APPROVAL `details["decision_id"]` of run `run_id` passed
        its deadline; made final (no approval of it is spent after). Refused when it is no such
        answer, its deadline has not passed, or it was settled otherwise."""
        decision_id = details.get("decision_id")
        if not isinstance(decision_id, str) or not decision_id:
            raise Refused(codes.INVALID_REQUEST, "an expiry names the REQUIRE_APPROVAL (details.decision_id)",
                          "act.details")
        asked = self.approvals.asked(self.recorder.read, run_id, decision_id)
        deadline = self.approvals.deadline_of(asked, self.policies_of)
        self.approvals.expire(decision_id, deadline)
        return {"decision_id": decision_id[:64], "deadline": format_time_ns(deadline * 1000),
                "tool": asked.get("tool"), "rule": asked.get("rule")}

    def approve(self, request: pb.ApproveRequest, caller: str) -> pb.ApproveResponse:
        response, token = self._person_act(request, caller, approve=True)
        return pb.ApproveResponse(decision=response, approval_token=token)

    def reject(self, request: pb.RejectRequest, caller: str) -> pb.RejectResponse:
        response, _ = self._person_act(request, caller, approve=False)
        return pb.RejectResponse(decision=response)

    def _person_act(self, request: Any, caller: str, *, approve: bool) -> tuple[pb.CheckResponse, str]:
        """Approve or reject a REQUIRE_APPROVAL answer: the person is the caller, the act is recorded."""
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        person = caller_name(caller)
        response = pb.CheckResponse(verdict=DENY, rule="approval", policy_revision=policies.revision)
        asked: dict[str, Any] = {}
        token = ""
        deadline = 0
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, no_principal(caller), "principal")
            if not request.run_id or not request.decision_id:
                raise Refused(codes.INVALID_REQUEST, "name the run and the REQUIRE_APPROVAL decision", "approval")
            asked = self.approvals.asked(self.recorder.read, request.run_id, request.decision_id)
            response.tenant, response.agent = asked.get("tenant") or "", asked.get("agent") or ""
            response.agent_version = asked.get("agent_version") or ""
            response.accountable_person = asked.get("accountable_person") or ""
            own = person == asked.get("accountable_person")
            rules = asked_rules(asked)
            barred = [r for r in rules if not principal.may_approve(response.tenant, response.agent, r, own_run=own)]
            if barred:
                raise Refused(codes.CALLER_NOT_PERMITTED,
                              f"{person!r} (principal {principal.name!r}) may not "
                              f"{'approve' if approve else 'reject'} {', '.join(barred)} of agent "
                              f"{response.agent!r}" + (" in a run they are accountable for" if own else ""),
                              "principal")
            require_role(policies, response.tenant, person, "approver")
            deadline = self.approvals.deadline_of(asked, self.policies_of)
            self.approvals.refuse_late(deadline)  # approved or rejected, an answer after it is too late
            if approve:  # an approval may be given again; only one can be spent
                self.approvals.not_rejected(request.decision_id)
            else:  # a rejection is final: no approval of it is honoured after, and none spent before
                self.approvals.reject(request.decision_id, person)
            response.verdict = ALLOW
            response.code = codes.APPROVED if approve else codes.REJECTED
            response.reason = (f"{'approved' if approve else 'rejected'} by {person}"
                               + (f": {request.note[:500]}" if request.note else ""))
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason
        stamped = stamp(response)
        if response.verdict == ALLOW and approve:
            token = self.approvals.issue(asked, person, principal.name if principal else "", response.decision_id,
                                         deadline)
        if not asked and request.run_id:  # no REQUIRE_APPROVAL record vouches for the run it names
            response.reason += f" (the request claimed run {request.run_id[:64]!r})"
        record = PersonsApproval.answering(
            response, stamped, policies, person, principal,
            tenant=response.tenant or None,
            run_id=asked.get("run_id"),
            root_run_id=asked.get("root_run_id"),
            parent_run_id=asked.get("parent_run_id"),
            actor_chain=asked.get("actor_chain"),
            accountable_person=response.accountable_person or None,
            agent=response.agent or None,
            agent_version=response.agent_version or None,
            action="approval" if approve else "rejection",
            tool=asked.get("tool"),
            arguments={"decision_id": request.decision_id[:64], "note": request.note[:1000]} if asked else None,
            rule=asked.get("rule") if response.verdict == ALLOW else response.rule,
            call_digest=asked.get("call_digest"),
            approval_rules=asked.get("approval_rules"),
            # the person's act: its approver is the person, whether they could act or were refused
            approver=person,
        ).to_dict()
        self.recorder.append_or_deny(record, response)
        if response.verdict != ALLOW:
            token = ""
        self.recorder.count(response.verdict, response.code)
        return response, token
