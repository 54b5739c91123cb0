"""Runs begun and acted on: StartRun (a recorded decision that mints the run's id and token) and
RecordAct (a person's pause, resume, amend or cancel, a run's own end, and the expiry of an
approval it waited for), each on the record before it is answered."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from checkpoint.audit.bounded import bound_refusal
from checkpoint.audit.stats import END_ACT, TERMINAL, EndInvalid, end_details
from checkpoint.engine import InvalidRequest, resolve_agent
from checkpoint.engine.context import MODES
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.server import convert
from checkpoint.server.act_records import RunActedOn, RunStarted, bounded_details, forget_claimed_run, stamp
from checkpoint.server.entry_acts import pins
from checkpoint.server.gateway_acts import GATEWAY_ACT, gateway_event, summary
from checkpoint.server.ids import new_run_id
from checkpoint.server.refusals import no_principal, require_role
from checkpoint.server.runs import MAX_RUN_ID, Established, Refused
from warden import canonical, codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.structs import struct_to_dict

if TYPE_CHECKING:
    from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY
log = logging.getLogger("warden.checkpoint.service")



MAX_INPUT_BYTES = 16 * 1024
PERSON_ACTS = frozenset({"resume", "cancel", "amend", "pause"})
ACT_ROLE = "operator"  # every act of PERSON_ACTS (whatever is added to it) is an operator's
MAX_ACT_ID = 64
# an approval the run waited for whose deadline passed: recorded by the run's token holder, no person
EXPIRE_ACT = "expire"
# and the run's own end, and an MCP gateway's own decisions (gateway_acts.py), which name no person
RUN_ACTS = PERSON_ACTS | {END_ACT, EXPIRE_ACT, GATEWAY_ACT}
WIDENING_ACTS = frozenset({"resume", "amend"})  # acts that let a run do more than it could before


def run_end(request: pb.RecordActRequest, principal: Principal, established: Established,
             details: dict[str, Any]) -> dict[str, Any]:
    """A run's end: recorded by the principal its token was issued to, while that principal may
    still check the agent; it names no person, and its details are what the statistics read."""
    if request.person:
        raise Refused(codes.INVALID_REQUEST, "a run's end names no person (a person's cancel is the act cancel)",
                      "act.person")
    if not principal.may_check(established.run.tenant, established.agent):
        raise Refused(codes.CALLER_NOT_PERMITTED, f"principal {principal.name!r} may not record the end of a run "
                      f"of agent {established.agent!r}", "principal")
    try:
        return end_details(details)
    except EndInvalid as exc:
        raise Refused(codes.INVALID_REQUEST, str(exc), "act.details") from None


def approval_expiry(request: pb.RecordActRequest, principal: Principal, established: Established,
                    details: dict[str, Any], expire: Callable[[str, dict[str, Any]], dict[str, Any]] | None
                    ) -> dict[str, Any]:
    """An approval's expiry: like a run's end, recorded by the principal its token was issued to and
    naming no person; the checkpoint itself checks the deadline passed (`expire`)."""
    if request.person:
        raise Refused(codes.INVALID_REQUEST, "an approval's expiry names no person", "act.person")
    if not principal.may_check(established.run.tenant, established.agent):
        raise Refused(codes.CALLER_NOT_PERMITTED, f"principal {principal.name!r} may not record an expiry in a run "
                      f"of agent {established.agent!r}", "principal")
    if expire is None:
        raise Refused(codes.INVALID_REQUEST, "this checkpoint keeps no approvals", "act")
    return expire(established.run.run_id, details)


class RunActs:
    def __init__(self, in_force: PoliciesInForce, recorder: Recorder, run_state: RunState,
                 expire: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None):
        self.expire = expire  # an approval's expiry made final (ApprovalActs.expire)
        self.in_force = in_force
        self.recorder = recorder
        self.run_state = run_state

    def start_run(self, request: pb.StartRunRequest, caller: str) -> pb.StartRunResponse:
        """A run begins with a recorded decision; on ALLOW the checkpoint mints its id and token."""
        started = time.perf_counter_ns()
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        out = pb.StartRunResponse()
        run = pb.RunContext(mode=request.mode, tenant=request.tenant)
        chain = [pb.Actor(kind=pb.ACTOR_KIND_PERSON, id=request.person[:MAX_RUN_ID])]
        response = pb.CheckResponse(verdict=DENY, rule="start_run", policy_revision=policies.revision,
                                    accountable_person=request.person[:MAX_RUN_ID])
        skills: dict[str, str] = {}
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, no_principal(caller), "principal")
            self.in_force.require_current_catalog()  # a run pins the live version: known current, or none
            if not request.person or len(request.person) > MAX_RUN_ID:
                raise Refused(codes.INVALID_REQUEST, f"a run names its accountable person (1 to {MAX_RUN_ID} characters)",
                              "start_run.person")
            if request.mode not in MODES:
                raise Refused(codes.INVALID_REQUEST, f"mode must be RUN_MODE_INTERACTIVE or RUN_MODE_BACKGROUND, not {_mode_name(request.mode)}",
                              "start_run.mode")
            if request.HasField("inputs") and request.inputs.ByteSize() > MAX_INPUT_BYTES:
                raise Refused(codes.INVALID_REQUEST, f"inputs are larger than {MAX_INPUT_BYTES} bytes", "start_run.inputs")
            tenant = request.tenant or "default"
            if request.agent:
                try:
                    agent = resolve_agent(policies, request.agent, request.agent_version, to_pin=True)
                except InvalidRequest as exc:
                    raise Refused(exc.code, str(exc.message), "start_run.agent") from None
                response.agent, response.agent_version = agent.agent, agent.agent_version
                if request.tenant and request.tenant != agent.tenant:
                    raise Refused(codes.INVALID_REQUEST,
                                  f"tenant {request.tenant[:100]!r} is not the agent's tenant {agent.tenant!r}",
                                  "start_run.tenant")
                tenant = agent.tenant
                out.agent.CopyFrom(agent)
            elif tenant not in policies.tenants:
                raise Refused(codes.INVALID_REQUEST, f"unknown tenant {tenant[:100]!r}", "start_run.tenant")
            response.tenant = tenant
            if not principal.may_check(tenant, request.agent):
                raise Refused(codes.CALLER_NOT_PERMITTED,
                              f"principal {principal.name!r} may not start runs of agent {request.agent[:100]!r} "
                              f"in tenant {tenant!r}", "principal")
            if not principal.may_vouch(request.person, caller_name(caller)):
                raise Refused(codes.CALLER_NOT_PERMITTED,
                              f"principal {principal.name!r} may not vouch for person {request.person[:100]!r}",
                              "principal")
            require_role(policies, tenant, request.person, "operator")
            run.run_id = new_run_id()
            run.root_run_id = run.run_id
            run.tenant = tenant
            if request.agent:
                chain.append(pb.Actor(kind=pb.ACTOR_KIND_AGENT, id=out.agent.agent,
                                      agent_version=out.agent.agent_version, run_id=run.run_id))
            run.actor_chain.extend(chain)
            if request.HasField("inputs"):
                run.inputs.CopyFrom(request.inputs)
                canonical.dumps(struct_to_dict(request.inputs, checked=False))  # refuses NaN: no canonical form
            out.run_id = run.run_id
            # a principal whose persons act only as themselves gets tokens only its caller can present
            bound = caller if principal.acts_as_self else ""
            skills = pins(policies, policies.agent_version(out.agent.agent, out.agent.agent_version)
                          if request.agent else None)
            out.run_token = self.run_state.tokens.issue(run, principal.name, policies.revision, bound, skills)
            response.verdict, response.code, response.reason = ALLOW, codes.ALLOWED, "run started"
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason
            out.ClearField("agent")
        except (ValueError, TypeError) as exc:
            response.code, response.rule, response.reason = codes.INVALID_REQUEST, "start_run.inputs", str(exc)[:200]
            out.run_id = out.run_token = ""
        if not run.actor_chain:
            run.actor_chain.extend(chain)
        stamped = stamp(response)
        record = RunStarted.answering(
            response, stamped, policies, caller_name(caller), principal,
            tenant=response.tenant or None,
            run_id=run.run_id or None,
            root_run_id=run.run_id or None,
            actor_chain=convert.actor_chain(run.actor_chain),
            accountable_person=request.person[:MAX_RUN_ID] or None,
            agent=response.agent or (request.agent[:100] or None),
            agent_version=response.agent_version or (request.agent_version[:100] or None),
            action="start_run",
            arguments={"mode": MODES.get(request.mode, "unspecified"),
                       "inputs": struct_to_dict(request.inputs, checked=False) if out.run_token and request.HasField("inputs")
                       else None,
                       **({"skills": skills} if skills and out.run_token else {})},
            latency_us=(time.perf_counter_ns() - started) // 1000,
        ).to_dict()
        self.recorder.append_or_deny(record, response)
        if response.verdict != ALLOW:
            out.run_id = out.run_token = ""
            out.ClearField("agent")
        self.recorder.count(response.verdict, response.code)
        out.decision.CopyFrom(response)
        return out

    def _first_on_log(self, first: str, run_id: str, response: pb.CheckResponse) -> bool:
        """Whether the decision that took an act id is on the log. The id stays taken by a decision
        that is on no log when its record failed and giving the id back failed too: answering
        "already recorded" then would name a record that does not exist, so `response` becomes a
        refusal instead (the first act may also still be being written: refused the same way)."""
        try:
            if self.recorder.on_log(first, run_id):
                return True
            response.code = codes.ACT_ID_UNRECORDED
            response.reason = (f"this act id was taken by decision {first}, which is not on the decision log: "
                               "that act did not take effect; send it with a new act id")
        except Exception as exc:  # noqa: BLE001 - fail closed, and say why
            log.error("whether decision %s is on the log cannot be read: %s", first, exc)
            response.code = codes.AUDIT_UNAVAILABLE
            response.reason = f"whether this act was already recorded cannot be read: {str(exc)[:200]}"
        response.verdict, response.rule = DENY, "act"
        return False

    def record_act(self, request: pb.RecordActRequest, caller: str) -> pb.RecordActResponse:
        """A person's act on a run, recorded before it takes effect; filed under the run its token
        establishes, naming the person the caller vouches for. Or a run's `end`, recorded by the
        holder of its token, naming nobody (docs/audit.md, "A run's end")."""
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        response = pb.CheckResponse(verdict=DENY, rule="act", policy_revision=policies.revision)
        check = pb.CheckRequest(run=request.run)
        established = None
        details = struct_to_dict(request.details, checked=False) if request.HasField("details") else {}
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, no_principal(caller), "principal")
            if request.act not in RUN_ACTS:
                raise Refused(codes.INVALID_REQUEST, f"act must be one of {', '.join(sorted(RUN_ACTS))}", "act")
            if len(request.act_id) > MAX_ACT_ID:
                raise Refused(codes.INVALID_REQUEST, f"act_id is longer than {MAX_ACT_ID} characters", "act")
            established = self.run_state.establish(check, principal, caller)
            if request.act == END_ACT:
                details = run_end(request, principal, established, details)
            elif request.act == EXPIRE_ACT:
                details = approval_expiry(request, principal, established, details, self.expire)
            elif request.act == GATEWAY_ACT:
                details = gateway_event(request.person, principal, established, details)
            elif not principal.may_vouch(request.person, caller_name(caller)):
                raise Refused(codes.CALLER_NOT_PERMITTED,
                              f"principal {principal.name!r} may not vouch for person {request.person[:100]!r}",
                              "principal")
            else:
                if request.act in WIDENING_ACTS and not principal.may_check(check.run.tenant or "default",
                                                                            established.agent):
                    # a resume lifts a pause (a person's, a breaker's) and an amendment may raise the
                    # run's ceilings: only a principal that may still ask for the run's agent there
                    # gives a run more to do. A pause or cancel only stops things, so it is recorded.
                    raise Refused(codes.CALLER_NOT_PERMITTED,
                                  f"principal {principal.name!r} may not {request.act} a run of agent "
                                  f"{established.agent!r} in tenant {check.run.tenant!r}", "principal")
                require_role(policies, check.run.tenant or "default", request.person, ACT_ROLE)
                if request.act in WIDENING_ACTS:  # an ended run stays ended; stopping it again is harmless
                    self.run_state.refuse_ended(established)
            if request.act == "cancel":
                self.run_state.end_run(established, f"cancelled by {request.person[:100]}")
            elif request.act == END_ACT and details["status"] in TERMINAL:
                self.run_state.end_run(established, f"its end: {details['status']} ({details['code']})")
            response.verdict, response.code = ALLOW, codes.RECORDED
            by = f"{details['status']} ({details['code']})" if request.act == END_ACT else f"by {request.person}"
            if request.act == EXPIRE_ACT:
                by = f"of the approval of decision {details['decision_id']} (deadline {details['deadline']})"
            response.reason = f"{request.act} {by}" + (f": {request.note[:500]}" if request.note else "")
            if request.act == GATEWAY_ACT:
                response.reason = summary(details)
                if details["event"] == "refused":  # on the log as what it is: a denial, with its code
                    response.verdict, response.code, response.rule = DENY, details["code"], "gateway"
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason
        if established is None:
            response.reason += forget_claimed_run(check)
        chain = convert.actor_chain(check.run.actor_chain)
        last = chain[-1] if chain and chain[-1].get("kind") == "agent" else {}
        run = check.run
        stamped = stamp(response)
        # The same act sent again (its caller restarted and cannot tell whether the first was
        # recorded): the key is the run the token established and the caller's act id, taken
        # by a unique insert, so the act is on the record once and the first answer stands.
        act_key = f"act:{run.run_id}:{request.act_id}" if request.act_id and response.verdict == ALLOW else ""
        if act_key:
            try:
                first = self.run_state.claim_act(act_key, response.decision_id)
            except Exception as exc:  # noqa: BLE001 - fail closed, on the record, as an end that cannot be kept
                log.error("the act id of a %s cannot be taken: %s", request.act, exc)
                response.verdict, response.code, response.rule = DENY, codes.RUN_STATE_UNAVAILABLE, "run_token"
                response.reason = f"whether this act was already recorded cannot be read: {str(exc)[:200]}"
                act_key, first = "", None
            if first is not None and self._first_on_log(first, run.run_id, response):
                response.decision_id = first
                response.reason = f"already recorded as decision {first}"
                self.recorder.count(response.verdict, response.code)
                return pb.RecordActResponse(decision=response)
            if first is not None:  # refused (the answer says why), on the record; the id stays taken
                act_key = ""
        record = RunActedOn.answering(
            response, stamped, policies, caller_name(caller), principal,
            tenant=run.tenant or None,
            run_id=run.run_id or None,
            root_run_id=run.root_run_id or run.run_id or None,
            parent_run_id=run.parent_run_id or None,
            actor_chain=chain or None,
            accountable_person=chain[0]["id"] if chain else None,
            agent=last.get("id"),
            agent_version=last.get("agent_version"),
            action=request.act if request.act in RUN_ACTS else "none",
            tool=details["tool"] if request.act == GATEWAY_ACT and response.rule == "gateway" else None,
            arguments={"person": request.person[:128], "note": request.note[:1000], "details": bounded_details(details)},
        ).to_dict()
        if established is None:
            record = bound_refusal(record)
        self.recorder.append_or_deny(record, response)
        if act_key and response.verdict != ALLOW:  # not on the record: the act may be sent again
            try:
                self.run_state.release_act(act_key, response.decision_id)
            except Exception as exc:  # noqa: BLE001 - the refusal stands; the caller sends it with a new act id
                log.error("the act id of a refused %s could not be given back: %s", request.act, exc)
        self.recorder.count(response.verdict, response.code)
        out = pb.RecordActResponse(decision=response)
        if request.act == "resume" and response.verdict == ALLOW and established is not None:
            # A person let the run go on: its authority lives another lifetime from now, so a run
            # lasts as long as people keep resuming it, and no longer unattended.
            try:
                out.run_token = self.run_state.tokens.renew(established.run.run_token)
            except Exception as exc:  # noqa: BLE001 - the resume stands; the run keeps the token it has
                log.error("run %s: its token could not be renewed: %s", established.run.run_id, exc)
        return out


def _mode_name(value: int) -> str:
    """The enum's own name for a mode, or the number a client sent that the enum does not have."""
    try:
        return pb.RunMode.Name(value)
    except ValueError:
        return str(value)
