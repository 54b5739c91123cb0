"""The service layer: turns a decision into an answer that may leave the checkpoint.

For every request it: takes the policy set in force (one reference, so a reload mid-request
changes nothing), runs the pure decision function, stamps a time-ordered decision id and the time,
signs a grant on an ALLOW of a tool call, and appends the record to the decision log. The answer
leaves only after the record is committed; when the log cannot take it, the answer becomes
DENY `audit_unavailable` without a grant. No gRPC here: `grpc_api` maps this to the wire.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from checkpoint.audit import AuditUnavailable, DecisionLog, mask_arguments
from checkpoint.audit.bounded import bound_refusal
from checkpoint.audit.record import CanonicalJson, format_time_ns, json_column
from checkpoint.audit.stats import END_ACT, EndInvalid, end_details
from checkpoint.audit.store import Filters
from checkpoint.engine import InvalidRequest, codes, decide, resolve_agent
from checkpoint.engine.context import MODES
from checkpoint.policy import PolicySet
from checkpoint.policy.audit_scope import AuditRefused, readable_tenants
from checkpoint.policy.learnings import LearningStore
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.policy.roles import role_refusal, roles_by_tenant
from checkpoint.server import convert, tracing
from checkpoint.server.agent_stats import AgentStatsReads
from checkpoint.server.approvals import Approvals, VerifiedApproval, asked_rules
from checkpoint.server.catalog_acts import CatalogActs
from checkpoint.server.entry_acts import EntryActs, fill_arguments, pins
from checkpoint.server.errors import InvalidArgument, PermissionDenied, Unavailable
from checkpoint.server.ids import new_decision_id
from checkpoint.server.learning_acts import LearningActs
from checkpoint.server.metrics import Metrics
from checkpoint.server.pins import PinnedPolicies, stricter
from checkpoint.server.reload import PolicyStore
from checkpoint.server.runs import MAX_RUN_ID, Established, Refused, RunTokens, child_run
from checkpoint.server.single_use import SingleUse
from warden import canonical, grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb

MAX_LOGGED_ARGUMENT_BYTES = 64 * 1024  # the engine refuses larger arguments; the log keeps their hash

log = logging.getLogger("warden.checkpoint.service")

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY
KNOWN_VERDICTS = frozenset({pb.VERDICT_ALLOW, pb.VERDICT_DENY, pb.VERDICT_REQUIRE_APPROVAL, pb.VERDICT_HALT})
MAX_BATCH_ITEMS = 256


class CheckpointService:
    def __init__(
        self,
        store: PolicyStore,
        decisions: DecisionLog,
        key: grants.SigningKey,
        metrics: Metrics,
        single_use: SingleUse,
        *,
        max_batch_items: int = MAX_BATCH_ITEMS,
        learnings: LearningStore | None = None,
    ):
        self.store = store
        self.log = decisions
        self.key = key
        # masked audit fields are keyed digests: a card number cannot be brute-forced from the log
        self.mask_key = hmac.new(key.secret, b"warden audit masking v1", hashlib.sha256).digest()
        self.runs = RunTokens(key.secret)
        self.pins = PinnedPolicies()
        self.approvals = Approvals(key.secret, self.mask_key, single_use)
        self.metrics = metrics
        self.max_batch_items = max_batch_items
        self._watch_stops: set[threading.Event] = set()
        self._watch_lock = threading.Lock()
        self._decision_counters: dict[tuple[int, str], Any] = {}
        # set when other processes share the data folder (`serve --workers N`): see shared_state.py
        self.sync_shared: Callable[[], None] | None = None
        self.catalog = CatalogActs(self)
        self.agent_stats = AgentStatsReads(self)
        # the time rules read as `now`: the checkpoint's own clock, never a caller's (tests fix it)
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.entries = EntryActs(self)  # skills and templates (docs/skills.md)
        store.on_catalog = self._record_catalog_changes
        self.learnings = LearningActs(self, learnings or LearningStore(None))
        store.learnings = self.learnings.index_for  # compiled into every policy set it serves

    # -- decisions -------------------------------------------------------------------------

    def _policies(self) -> PolicySet:
        if self.sync_shared is not None:
            self.sync_shared()  # another worker's catalog or learning act counts from now on
        policies = self.store.current
        if policies is None:
            raise Unavailable("policy_error", "no policy set is loaded; see the checkpoint's health details")
        return policies

    def check(self, request: pb.CheckRequest, caller: str) -> pb.CheckResponse:
        """Establish, decide, sign, record. Raises InvalidArgument / Unavailable when no decision
        is possible. `caller` is the authenticated identity (`token:NAME`, `mtls:...`, `unix`)."""
        started = time.perf_counter_ns()
        policies = self._policies()
        principal = policies.principals.of(caller)
        action = request.WhichOneof("action")
        approval = None
        established = None
        filled = False
        shadow: tuple[str, str, str] | None = None
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, _no_principal(caller), "principal")
            if not request.HasField("run"):
                raise InvalidRequest(codes.INVALID_REQUEST, "the request has no run context", "run")
            if action is None:
                raise InvalidRequest(codes.INVALID_REQUEST, "the request proposes no action", "action")
            established = self._establish(request, principal, caller)
            if not principal.may_check(request.run.tenant, established.agent):
                raise Refused(codes.CALLER_NOT_PERMITTED,
                              f"principal {principal.name!r} may not ask for agent {established.agent!r} "
                              f"of tenant {request.run.tenant!r}", "principal")
            # a template tool's call is decided, approved, signed and recorded as it will run
            filled = fill_arguments(policies, request)
            if request.HasField("approval"):
                approval = self.approvals.verify(request)
            approver = approval.approver if approval else ""
            approved = approval.rules if approval else frozenset()
            now = self.clock()  # one instant for every decision
            response = decide(policies, request, approver=approver, approved_rules=approved, now=now)
            pinned_answer = None
            pinned_revision = established.revision
            # the revision the run began under, and the one its agent version was reviewed with:
            # edits since widen neither (each is the current set unless it differs)
            bound = _version_bound(policies, established.run)
            for revision in dict.fromkeys((established.revision, *((bound,) if bound else ()))):
                pinned = self.pins.get(policies, revision)
                if pinned is policies:
                    continue
                answer = decide(pinned, request, approver=approver, approved_rules=approved, now=now)
                if policies.has_shadow:  # stricter() edits its arguments: the shadow gets its own copy
                    kept = pb.CheckResponse()
                    kept.CopyFrom(answer)
                    if pinned_answer is None:
                        pinned_answer, pinned_revision = kept, revision
                    else:
                        pinned_answer = stricter(pinned_answer, kept, revision)
                response = stricter(response, answer, revision)
            if action == "delegation":
                response = _delegation_needs_operator(policies, request, response, principal)
            if policies.has_shadow:  # recorded beside the answer, never enforced
                shadow = _shadow_answer(policies, request, approver, approved, now, pinned_answer,
                                        pinned_revision, principal)
        except Refused as refused:
            response = pb.CheckResponse(verdict=DENY, code=refused.code, rule=refused.rule, reason=refused.reason)
        except InvalidRequest as exc:
            self.metrics.refusals.labels(exc.code).inc()
            claimed = _forget_claimed_run(request) if established is None else ""
            self._record_refusal(request, exc.code, str(exc.message) + claimed, policies.revision, caller, principal)
            raise InvalidArgument(exc.code, str(exc.message), exc.field or "") from exc
        except Exception:
            # A crash in the decision function must not become an ALLOW, nor an unrecorded error.
            log.exception("decision function failed")
            response = pb.CheckResponse(
                verdict=DENY, code="policy_error", rule="engine", reason="the decision function failed"
            )
        if established is None:  # refused before the run was established: file it under no run
            response.reason += _forget_claimed_run(request)
        decided = time.perf_counter_ns()
        self.metrics.decision_seconds.observe((decided - started) / 1e9)
        if response.verdict not in KNOWN_VERDICTS:
            response = _fail_closed(
                response, "policy_error", "the decision function gave no verdict", rule="engine"
            )
        if not response.policy_revision:
            response.policy_revision = policies.revision
        # converted once: the approval digest, the grant and the record all read these
        arguments = _tool_arguments(request, action)
        digest = None
        if response.verdict == pb.VERDICT_REQUIRE_APPROVAL or (approval is not None and response.verdict == ALLOW):
            digest = self.approvals.digest(request, response, action)
        if approval is not None and response.verdict == ALLOW:
            assert digest is not None
            response = self._spend(approval, request, response, digest)

        now_ns = time.time_ns()
        response.decision_id = new_decision_id()
        convert.timestamp_from_ns(now_ns, response.decided_at)
        if response.verdict == ALLOW and action == "delegation" and principal is not None and established:
            self._child_run(policies, request, response, principal, established)
        # a grant binds a pinned agent version: a person acting directly is decided and
        # recorded, but the toolrunner runs agents' calls only
        signed_text = None  # the arguments' canonical text, once a grant has hashed it
        if arguments is not None and response.verdict == ALLOW and response.agent_version:
            try:
                signed_text = self._sign(policies, request, response, arguments)
            except (ValueError, TypeError) as exc:  # e.g. NaN: no canonical form, no grant
                response = _fail_closed(
                    response, "invalid_arguments", f"arguments cannot be signed: {exc}", rule="grant"
                )
        if filled and response.HasField("grant"):  # what the grant covers: the caller sends these
            response.arguments.CopyFrom(request.tool_call.arguments)

        record = self._record(request, response, action, arguments, policies, now_ns, established, signed_text)
        record["latency_us"] = (time.perf_counter_ns() - started) // 1000
        record["caller"] = caller_name(caller)
        record["principal"] = principal.name if principal is not None else None
        record["call_digest"] = digest
        record["approval_rules"] = ",".join(response.approval_rules) or None
        if shadow is not None:
            record["shadow_verdict"], record["shadow_code"], record["shadow_rule"] = shadow
        if approval is not None:  # a verified approval: who approved, and which approval record (spent on an ALLOW)
            record["approver"], record["approval_id"] = approval.approver, approval.approval_id or None
        if established is None:  # every string of it came from a caller nobody vouched for
            record = bound_refusal(record)
        self._append_or_deny(record, response)
        self._count(response.verdict, response.code)
        if response.learnings or response.verdict == pb.VERDICT_HALT:
            self.learnings.after_check(request, response)  # triggers; a breaker proposes a learning
        return response

    def _establish(self, request: Any, principal: Principal, caller: str) -> Established:
        """The run the request's token establishes (its run context replaced by the token's), if
        the token was issued to this principal (and, when it binds one, to this credential)."""
        established = self.runs.establish(request)
        if established.principal != principal.name or established.caller not in ("", caller):
            raise Refused(codes.RUN_TOKEN_INVALID, "the run token was issued to another caller", "run_token")
        return established

    def _spend(self, approval: VerifiedApproval, request: pb.CheckRequest, response: pb.CheckResponse,
               digest: str) -> pb.CheckResponse:
        """An approval presented with a call the checkpoint allows is spent on it, whichever of the
        run's two decisions (current, pinned) it was needed for: never reusable, never loose."""
        try:
            problem = self.approvals.spend(approval, request, digest)
        except Exception as exc:  # the single-use store failed: the approval cannot be vouched for
            log.error("approval %s could not be spent: %s", approval.decision_id, exc)
            problem = "the approval could not be spent (its single-use store failed)"
        if problem is None:
            return response
        return _fail_closed(response, codes.APPROVAL_INVALID, problem, rule="approval")

    def append(self, record: dict[str, Any]) -> int:
        """Append a record to the decision log, with the trace id of the call being served (the
        `traceparent` its caller sent, read once per RPC by the gRPC layer: checkpoint/server/tracing.py)."""
        if "trace_id" not in record:
            record["trace_id"] = tracing.current.get()
        return self.log.append(record)

    def _append_or_deny(self, record: dict[str, Any], response: Any) -> None:
        """Record before answering: when the log cannot take the record, the answer is a DENY."""
        try:
            self.append(record)
        except Exception as exc:  # AuditUnavailable, or anything else: no answer without its record
            self.metrics.audit_failures.inc()
            log.error("decision %s not recorded, denying: %s", response.decision_id, exc)
            response.CopyFrom(_fail_closed(
                response, "audit_unavailable", "the decision could not be recorded", rule="audit"
            ))

    def _child_run(self, policies: PolicySet, request: pb.CheckRequest, response: pb.CheckResponse,
                   principal: Principal, parent: Established) -> None:
        """An allowed delegation mints the child's run id and its run token: for the same principal,
        pinned to the parent's revision (a child never gets what an edit since its parent began added)."""
        child = policies.agent_version(request.delegation.agent, response.child_agent_version)
        run_id = new_run_id()
        run = child_run(request.run, request, response, run_id, child.tenant if child else request.run.tenant)
        response.child_run_id = run_id
        # the child pins the skills its own agent lists, as they are now (docs/skills.md)
        response.child_run_token = self.runs.issue(run, principal.name, parent.revision, parent.caller,
                                                   pins(policies, child))

    def _count(self, verdict: int, code: str) -> None:
        # prometheus_client's labels() costs a lock and a few dict lookups per call; the
        # (verdict, code) pairs are few, so their children are kept here.
        key = (verdict, code)
        child = self._decision_counters.get(key)
        if child is None:
            child = self.metrics.decisions.labels(convert.verdict_name(verdict), code)
            self._decision_counters[key] = child
        child.inc()

    def check_plan(self, request: pb.CheckPlanRequest, caller: str) -> pb.CheckPlanResponse:
        check = pb.CheckRequest(
            run=request.run, plan=request.plan, counters=request.counters, explain=request.explain
        )
        return pb.CheckPlanResponse(decision=self.check(check, caller))

    def check_batch(self, request: pb.CheckBatchRequest, caller: str) -> pb.CheckBatchResponse:
        if len(request.items) > self.max_batch_items:
            raise InvalidArgument(
                "batch_too_large", f"{len(request.items)} items; at most {self.max_batch_items}", "items"
            )
        self._policies()  # no policies: the whole batch is unavailable, not each item
        out = pb.CheckBatchResponse()
        for item in request.items:
            result = out.results.add(correlation_id=item.correlation_id)
            if not item.HasField("request"):
                result.error.CopyFrom(
                    pb.ErrorDetail(code="invalid_request", message="item has no request", field="request")
                )
                continue
            try:
                result.response.CopyFrom(self.check(item.request, caller))
            except (InvalidArgument, Unavailable) as exc:
                result.error.CopyFrom(exc.detail())
        return out

    def resolve_agent(self, request: pb.ResolveAgentRequest, caller: str) -> pb.ResolveAgentResponse:
        policies = self._policies()
        if not request.agent:
            raise InvalidArgument("invalid_request", "agent is required", "agent")
        try:
            response = resolve_agent(policies, request.agent, request.agent_version)
        except InvalidRequest as exc:
            raise InvalidArgument(exc.code, str(exc.message), exc.field or "agent") from exc
        principal = policies.principals.of(caller)
        if principal is None or not principal.may_check(response.tenant, response.agent):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"{caller_name(caller)!r} may not ask for agent {request.agent[:100]!r}", "agent")
        if not response.policy_revision:
            response.policy_revision = policies.revision
        return response

    # -- runs and a person's acts ------------------------------------------------------------

    def start_run(self, request: pb.StartRunRequest, caller: str) -> pb.StartRunResponse:
        """A run begins with a recorded decision; on ALLOW the checkpoint mints its id and token."""
        started = time.perf_counter_ns()
        policies = self._policies()
        principal = policies.principals.of(caller)
        out = pb.StartRunResponse()
        run = pb.RunContext(mode=request.mode, tenant=request.tenant)
        chain = [pb.Actor(kind=pb.ACTOR_KIND_PERSON, id=request.person[:MAX_RUN_ID])]
        response = pb.CheckResponse(verdict=DENY, rule="start_run", policy_revision=policies.revision,
                                    accountable_person=request.person[:MAX_RUN_ID])
        skills: dict[str, str] = {}
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, _no_principal(caller), "principal")
            if not request.person or len(request.person) > MAX_RUN_ID:
                raise Refused(codes.INVALID_REQUEST, f"a run names its accountable person (1 to {MAX_RUN_ID} characters)",
                              "start_run.person")
            if request.mode not in MODES:
                raise Refused(codes.INVALID_REQUEST, "mode must be INTERACTIVE or BACKGROUND", "start_run.mode")
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
            _require_role(policies, tenant, request.person, "operator")
            run.run_id = new_run_id()
            run.root_run_id = run.run_id
            run.tenant = tenant
            if request.agent:
                chain.append(pb.Actor(kind=pb.ACTOR_KIND_AGENT, id=out.agent.agent,
                                      agent_version=out.agent.agent_version, run_id=run.run_id))
            run.actor_chain.extend(chain)
            if request.HasField("inputs"):
                run.inputs.CopyFrom(request.inputs)
                canonical.dumps(convert.struct_to_dict(request.inputs))  # refuses NaN: no canonical form
            out.run_id = run.run_id
            # a principal whose persons act only as themselves gets tokens only its caller can present
            bound = caller if principal.acts_as_self else ""
            skills = pins(policies, policies.agent_version(out.agent.agent, out.agent.agent_version)
                          if request.agent else None)
            out.run_token = self.runs.issue(run, principal.name, policies.revision, bound, skills)
            response.verdict, response.code, response.reason = ALLOW, codes.ALLOWED, "run started"
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason
            out.ClearField("agent")
        except (ValueError, TypeError) as exc:
            response.code, response.rule, response.reason = codes.INVALID_REQUEST, "start_run.inputs", str(exc)[:200]
            out.run_id = out.run_token = ""
        if not run.actor_chain:
            run.actor_chain.extend(chain)
        stamped = _stamp(response)
        record = _act_record(
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
                       "inputs": convert.struct_to_dict(request.inputs) if out.run_token and request.HasField("inputs")
                       else None,
                       **({"skills": skills} if skills and out.run_token else {})},
            latency_us=(time.perf_counter_ns() - started) // 1000,
        )
        self._append_or_deny(record, response)
        if response.verdict != ALLOW:
            out.run_id = out.run_token = ""
            out.ClearField("agent")
        self._count(response.verdict, response.code)
        out.decision.CopyFrom(response)
        return out

    def record_act(self, request: pb.RecordActRequest, caller: str) -> pb.RecordActResponse:
        """A person's act on a run, recorded before it takes effect; filed under the run its token
        establishes, naming the person the caller vouches for. Or a run's `end`, recorded by the
        holder of its token, naming nobody (docs/audit.md, "A run's end")."""
        policies = self._policies()
        principal = policies.principals.of(caller)
        response = pb.CheckResponse(verdict=DENY, rule="act", policy_revision=policies.revision)
        check = pb.CheckRequest(run=request.run)
        established = None
        details = convert.struct_to_dict(request.details) if request.HasField("details") else {}
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, _no_principal(caller), "principal")
            if request.act not in RUN_ACTS:
                raise Refused(codes.INVALID_REQUEST, f"act must be one of {', '.join(sorted(RUN_ACTS))}", "act")
            established = self._establish(check, principal, caller)
            if request.act == END_ACT:
                details = _run_end(request, principal, established, details)
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
                _require_role(policies, check.run.tenant or "default", request.person, ACT_ROLE)
            response.verdict, response.code = ALLOW, codes.RECORDED
            by = f"{details['status']} ({details['code']})" if request.act == END_ACT else f"by {request.person}"
            response.reason = f"{request.act} {by}" + (f": {request.note[:500]}" if request.note else "")
        except Refused as refused:
            response.code, response.rule, response.reason = refused.code, refused.rule, refused.reason
        if established is None:
            response.reason += _forget_claimed_run(check)
        chain = convert.actor_chain(check.run.actor_chain)
        last = chain[-1] if chain and chain[-1].get("kind") == "agent" else {}
        run = check.run
        record = _act_record(
            response, _stamp(response), policies, caller_name(caller), principal,
            tenant=run.tenant or None,
            run_id=run.run_id or None,
            root_run_id=run.root_run_id or run.run_id or None,
            parent_run_id=run.parent_run_id or None,
            actor_chain=chain or None,
            accountable_person=chain[0]["id"] if chain else None,
            agent=last.get("id"),
            agent_version=last.get("agent_version"),
            action=request.act if request.act in RUN_ACTS else "none",
            arguments={"person": request.person[:128], "note": request.note[:1000], "details": _bounded(details)},
        )
        if established is None:
            record = bound_refusal(record)
        self._append_or_deny(record, response)
        self._count(response.verdict, response.code)
        return pb.RecordActResponse(decision=response)

    def approve(self, request: pb.ApproveRequest, caller: str) -> pb.ApproveResponse:
        response, token = self._person_act(request, caller, approve=True)
        return pb.ApproveResponse(decision=response, approval_token=token)

    def reject(self, request: pb.RejectRequest, caller: str) -> pb.RejectResponse:
        response, _ = self._person_act(request, caller, approve=False)
        return pb.RejectResponse(decision=response)

    def _person_act(self, request: Any, caller: str, *, approve: bool) -> tuple[pb.CheckResponse, str]:
        """Approve or reject a REQUIRE_APPROVAL answer: the person is the caller, the act is recorded."""
        policies = self._policies()
        principal = policies.principals.of(caller)
        person = caller_name(caller)
        response = pb.CheckResponse(verdict=DENY, rule="approval", policy_revision=policies.revision)
        asked: dict[str, Any] = {}
        token = ""
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, _no_principal(caller), "principal")
            if not request.run_id or not request.decision_id:
                raise Refused(codes.INVALID_REQUEST, "name the run and the REQUIRE_APPROVAL decision", "approval")
            asked = self.approvals.asked(self.log.read, request.run_id, request.decision_id)
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
            _require_role(policies, response.tenant, person, "approver")
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
        stamped = _stamp(response)
        if response.verdict == ALLOW and approve:
            token = self.approvals.issue(asked, person, principal.name if principal else "", response.decision_id)
        if not asked and request.run_id:  # no REQUIRE_APPROVAL record vouches for the run it names
            response.reason += f" (the request claimed run {request.run_id[:64]!r})"
        record = _act_record(
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
        )
        self._append_or_deny(record, response)
        if response.verdict != ALLOW:
            token = ""
        self._count(response.verdict, response.code)
        return response, token

    def _record_catalog_changes(self, policies: PolicySet) -> None:
        """A load applied or proposed policy files' agent changes: each goes on the record. Best
        effort: the files changed on the operator's disk whatever the log says."""
        for change in policies.catalog_changes:
            response = pb.CheckResponse(verdict=ALLOW, rule="catalog", policy_revision=policies.revision,
                                        code=codes.PROPOSED if change.act == "propose" else codes.CATALOG_CHANGED,
                                        reason=f"{change.act} {getattr(change, 'label', change.agent)} "
                                               f"{change.version} from {change.source}")
            record = _act_record(response, _stamp(response), policies, change.by, None, tenant=change.tenant,
                                 agent=change.agent, agent_version=change.version, action="catalog",
                                 arguments=change.details())
            try:
                self.append(record)
            except Exception as exc:  # noqa: BLE001
                self.metrics.audit_failures.inc()
                log.error("catalog change %s %s %s not recorded: %s", change.act, change.agent, change.version, exc)
            self._count(response.verdict, response.code)

    # -- grants and records ----------------------------------------------------------------

    def _sign(
        self,
        policies: PolicySet,
        request: pb.CheckRequest,
        response: pb.CheckResponse,
        arguments: dict[str, Any],
    ) -> CanonicalJson:
        """Sign the answer's grant in place. Returns the arguments' canonical text the grant's hash
        covers, which is also what the record stores of them unless the tool's audit masks some."""
        text = json_column("arguments", arguments)  # ValueError when they have no canonical form
        grants.sign_into(
            response.grant,
            self.key,
            decision_id=response.decision_id,
            run_id=request.run.run_id,
            agent=response.agent,
            agent_version=response.agent_version,
            tool=request.tool_call.tool,
            arguments_sha256=hashlib.sha256(text.encode()).hexdigest(),
            policy_revision=response.policy_revision,
            ttl_seconds=policies.instance.grant_ttl_seconds,
        )
        self.metrics.grants.inc()
        return text

    def _record(
        self,
        request: pb.CheckRequest,
        response: pb.CheckResponse,
        action: str | None,
        arguments: dict[str, Any] | None,
        policies: PolicySet | None,
        now_ns: int,
        established: Established | None = None,
        signed_text: CanonicalJson | None = None,
    ) -> dict[str, Any]:
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
        return {
            "decision_id": response.decision_id or new_decision_id(),
            "time": format_time_ns(now_ns),
            "tenant": response.tenant or run.tenant or None,
            "run_id": run.run_id or None,
            "root_run_id": run.root_run_id or run.run_id or None,  # a run that names no root is its own
            "parent_run_id": run.parent_run_id or None,
            "actor_chain": logged_chain,
            "accountable_person": response.accountable_person or person,
            "agent": response.agent or last.get("id") or None,
            "agent_version": response.agent_version or last.get("agent_version") or None,
            "action": action,
            "tool": tool or None,
            "arguments": _logged_arguments(request, response, action, arguments, policies, self.mask_key,
                                           signed_text),
            "verdict": convert.verdict_name(response.verdict),
            "code": response.code,
            "rule": response.rule or None,
            "reason": response.reason or None,
            "policy_revision": response.policy_revision or None,
        }

    def _record_refusal(self, request: Any, code: str, reason: str, revision: str | None,
                        caller: str | None = None, principal: Principal | None = None) -> None:
        """Record a request refused before any decision (invalid, unauthenticated).

        Best effort: the caller is refused either way, so a log failure here changes no answer.
        A request that names no action (or is not a CheckRequest at all) is recorded with
        action "none" and whatever run context it carried.
        """
        if isinstance(request, pb.CheckPlanRequest):
            request = pb.CheckRequest(run=request.run, plan=request.plan, counters=request.counters)
        if not isinstance(request, pb.CheckRequest):
            request = pb.CheckRequest()
        action = request.WhichOneof("action") or "none"
        response = pb.CheckResponse(
            decision_id=new_decision_id(), verdict=DENY, code=code, rule="request", reason=reason,
            policy_revision=revision or "",
        )  # fmt: skip
        arguments = _tool_arguments(request, action)
        record = self._record(request, response, action, arguments, self.store.current, time.time_ns())
        record["caller"] = caller_name(caller) if caller else None
        record["principal"] = principal.name if principal is not None else None
        try:
            self.append(bound_refusal(record))  # capped: a refused caller chose these values
        except AuditUnavailable as exc:
            self.metrics.audit_failures.inc()
            log.error("refusal (%s) not recorded: %s", code, exc)

    def record_malformed(self, reason: str) -> None:
        """Bytes that did not parse: refused, and recorded with action "none"."""
        self.metrics.refusals.labels("invalid_request").inc()
        self._record_refusal(None, "invalid_request", reason, self.store.status.revision or None)

    def record_unauthenticated(self, method: str, request: Any) -> None:
        self.metrics.refusals.labels("unauthenticated").inc()
        requests = (
            [i.request for i in request.items] if isinstance(request, pb.CheckBatchRequest) else [request]
        )
        revision = self.store.status.revision or None
        for item in requests:
            claimed = _forget_claimed_run(item)
            self._record_refusal(item, "unauthenticated", f"{method}: no valid credentials{claimed}", revision)

    # -- the decision stream ---------------------------------------------------------------

    def watch_tenants(self, caller: str) -> list[str] | None:
        """The tenants whose records the caller may read (None: every record, those naming no
        tenant too); raises PermissionDenied when it may read none. The rule is
        `checkpoint.policy.audit_scope.readable_tenants`, which the auditor's web view asks too."""
        policies = self._policies()
        try:
            return readable_tenants(policies.principals, policies.tenants, caller)
        except AuditRefused as refused:
            raise PermissionDenied(refused.code, refused.message) from None

    # -- roles -----------------------------------------------------------------------------

    def roles(self, request: pb.RolesRequest, caller: str) -> pb.RolesResponse:
        """A person's roles per tenant, for a caller that may vouch for them (the driver asks
        before each operator action). A read of the policy files: not recorded."""
        policies = self._policies()
        if not request.person or len(request.person) > MAX_RUN_ID:
            raise InvalidArgument(codes.INVALID_REQUEST, f"name the person (1 to {MAX_RUN_ID} characters)", "person")
        principal = policies.principals.of(caller)
        if principal is None:
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, _no_principal(caller))
        if not principal.may_vouch(request.person, caller_name(caller)):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"principal {principal.name!r} may not vouch for person {request.person[:100]!r}",
                                   "person")
        out = pb.RolesResponse(person=request.person, policy_revision=policies.revision)
        for tenant, held in roles_by_tenant(policies.tenants, request.person).items():
            out.tenants.add(tenant=tenant, roles=held, roles_declared=policies.tenants[tenant].roles is not None)
        return out

    def watch(
        self, request: pb.WatchDecisionsRequest, stop: threading.Event, tenants: list[str] | None = None,
        caller: str | None = None,
    ) -> Iterator[pb.WatchDecisionsResponse]:
        """The records after `request.after_seq` of `tenants` (None: all), then new ones as they
        are committed. With `caller`, the caller's scope is asked again whenever the policy set in
        force changes, before the next record goes out: a person taken off a tenant's auditors
        stops reading it then (PERMISSION_DENIED when nothing is left), not when the stream ends."""
        if request.after_seq < 0:
            raise InvalidArgument("invalid_request", "after_seq must not be negative", "after_seq")
        filters: Filters = {
            "run_id": request.run_id or None,
            "root_run_id": request.root_run_id or None,
            "agent": request.agent or None,
            "code": request.code or None,
            "verdict": convert.verdict_name(request.verdict) if request.verdict else None,
            "tenants": tenants,
        }
        if request.no_follow:
            records = self.log.read(request.after_seq, **filters)
        else:
            records = self.log.follow(request.after_seq, stop_event=stop, **filters)
        with self._watch_lock:
            self._watch_stops.add(stop)
        # None: the scope is asked again before the first record too, since `tenants` was worked
        # out from whatever policy set was in force then, and a reload may have landed since
        revision: str | None = None
        allowed = tenants
        try:
            for record in records:
                if stop.is_set():
                    return
                if caller is not None:
                    current = self.store.current  # one attribute read per record
                    if current is not None and current.revision != revision:
                        revision = current.revision
                        fresh = self.watch_tenants(caller)  # PermissionDenied ends the stream
                        # only ever narrower than the query the stream was opened with
                        allowed = fresh if allowed is None else [t for t in allowed if fresh is None or t in fresh]
                    if allowed is not None and record.get("tenant") not in allowed:
                        continue
                yield pb.WatchDecisionsResponse(record=convert.record_to_proto(record))
        finally:
            with self._watch_lock:
                self._watch_stops.discard(stop)

    def wake_watchers(self) -> None:
        self.log.wake_followers()

    def stop_watchers(self) -> None:
        with self._watch_lock:
            stops = list(self._watch_stops)
        for stop in stops:
            stop.set()
        self.log.wake_followers()


MAX_INPUT_BYTES = 16 * 1024
PERSON_ACTS = frozenset({"resume", "cancel", "amend", "pause"})
ACT_ROLE = "operator"  # every act of PERSON_ACTS (whatever is added to it) is an operator's
RUN_ACTS = PERSON_ACTS | {END_ACT}  # and the run's own end, which names no person
WIDENING_ACTS = frozenset({"resume", "amend"})  # acts that let a run do more than it could before


def new_run_id() -> str:
    """Run ids are minted here, never chosen by a caller: none is empty, none is reused."""
    return "run-" + new_decision_id()


def _stamp(response: pb.CheckResponse) -> str:
    """Give an answer its decision id and time; the time as the record writes it."""
    now_ns = time.time_ns()
    response.decision_id = new_decision_id()
    convert.timestamp_from_ns(now_ns, response.decided_at)
    return format_time_ns(now_ns)


def _act_record(response: pb.CheckResponse, stamped: str, policies: PolicySet, caller: str,
                principal: Principal | None, **fields: Any) -> dict[str, Any]:
    """The record of an answer that is not a Check (StartRun, Approve, Reject, RecordAct): what
    every record holds, then the act's own fields (which may override `rule`)."""
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


MAX_ACT_DETAILS_BYTES = 4096


def _bounded(details: dict[str, Any]) -> dict[str, Any]:
    """An act's details as recorded: whole when small (what was raised, the goal version), else
    their hash and size, so no caller can make one record (and the log) as large as a request."""
    try:
        size = len(canonical.dumps(details))
    except (ValueError, TypeError) as exc:
        return {"unrecordable": str(exc)[:200]}
    return details if size <= MAX_ACT_DETAILS_BYTES else {"sha256": canonical.sha256_hex(details), "bytes": size}


def _forget_claimed_run(request: Any) -> str:
    """Drop a run context nobody vouched for, so a refusal is never filed under another run's id
    (a caller could otherwise write DENY records into any run's history); the claim stays in the
    reason, capped."""
    run = getattr(request, "run", None)
    if run is None or not request.HasField("run"):
        return ""
    claimed = run.run_id
    request.ClearField("run")
    return f" (the request claimed run {claimed[:64]!r})" if claimed else ""


def _run_end(request: pb.RecordActRequest, principal: Principal, established: Established,
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


def _require_role(policies: PolicySet, tenant: str, person: str, role: str) -> None:
    """The tenant's roles must agree with the principal's rights: refused `role_required`."""
    refusal = role_refusal(policies.tenants, tenant, person, role)
    if refusal is not None:
        raise Refused(codes.ROLE_REQUIRED, refusal, f"role:{role}")


def _version_bound(policies: PolicySet, run: pb.RunContext) -> str:
    """The revision the acting agent's pinned version was reviewed with, when it is not the
    current files' version of that agent (PolicySet.version_bound); "" otherwise."""
    chain = run.actor_chain
    if not chain or chain[-1].kind != pb.ACTOR_KIND_AGENT:
        return ""
    return policies.version_bound(chain[-1].id, chain[-1].agent_version)


def _shadow_answer(policies: PolicySet, request: pb.CheckRequest, approver: str, approved: frozenset[str],
                   now: Any, pinned_answer: pb.CheckResponse | None, revision: str,
                   principal: Principal | None = None) -> tuple[str, str, str]:
    """The answer with the `mode: shadow` rules enforced too: (verdict, code, rule) for the record,
    held to a pinned revision's answer as the enforced one is. It never changes the enforced
    answer: any failure here is recorded as the shadow's own."""
    try:
        shadow = decide(policies.shadow(), request, approver=approver, approved_rules=approved, now=now)
        if pinned_answer is not None:
            shadow = stricter(shadow, pinned_answer, revision)
        if request.WhichOneof("action") == "delegation":
            shadow = _delegation_needs_operator(policies, request, shadow, principal)
        return convert.verdict_name(shadow.verdict), shadow.code, shadow.rule
    except Exception as exc:  # noqa: BLE001 - a shadow failure is evidence, not an outage
        log.warning("shadow evaluation failed: %s", exc)
        return "DENY", "policy_error", "engine"


def _delegation_needs_operator(policies: PolicySet, request: pb.CheckRequest,
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
        return _fail_closed(response, codes.CALLER_NOT_PERMITTED,
                            f"principal {name!r} may not start runs of agent {agent[:100]!r} in tenant "
                            f"{(tenant or 'default')[:100]!r}: a delegation starts a run there", rule="principal")
    chain = request.run.actor_chain
    person = chain[0].id if chain and chain[0].kind == pb.ACTOR_KIND_PERSON else ""
    refusal = role_refusal(policies.tenants, tenant or "default", person, "operator")
    if refusal is None:
        return response
    return _fail_closed(response, codes.ROLE_REQUIRED, f"{refusal}: a delegation starts a run there",
                        rule="role:operator")


def _no_principal(caller: str) -> str:
    return f"the credential {caller_name(caller)[:100]!r} names no principal in the policy files"


def _fail_closed(response: pb.CheckResponse, code: str, reason: str, *, rule: str) -> pb.CheckResponse:
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


def _tool_arguments(request: pb.CheckRequest, action: str | None) -> dict[str, Any] | None:
    """A tool call's arguments as plain values (numbers as the Struct's doubles), else None."""
    return convert.struct_to_dict(request.tool_call.arguments) if action == "tool_call" else None


def _logged_arguments(
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
