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
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from checkpoint.audit import AuditUnavailable, DecisionLog, mask_arguments
from checkpoint.audit.bounded import bound_refusal
from checkpoint.audit.record import CanonicalJson, DecisionRecord, format_time_ns, json_column
from checkpoint.engine import InvalidRequest, decide, resolve_agent
from checkpoint.policy import PolicySet
from checkpoint.policy.learnings import LearningStore
from checkpoint.policy.pinned import load as load_pinned
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.policy.roles import role_refusal, roles_by_tenant
from checkpoint.server import convert, tracing
from checkpoint.server.act_records import act_record, forget_claimed_run, stamp
from checkpoint.server.agent_stats import AgentStatsReads
from checkpoint.server.approval_acts import ApprovalActs
from checkpoint.server.approvals import Approvals, VerifiedApproval
from checkpoint.server.catalog_acts import CatalogActs
from checkpoint.server.decision_stream import DecisionStream
from checkpoint.server.entry_acts import EntryActs, fill_arguments, pins
from checkpoint.server.ids import new_decision_id, new_run_id
from checkpoint.server.learning_acts import LearningActs
from checkpoint.server.metrics import Metrics
from checkpoint.server.pins import PinnedPolicies, stricter
from checkpoint.server.refusals import no_principal
from checkpoint.server.reload import PolicyStore
from checkpoint.server.run_acts import RunActs
from checkpoint.server.runs import MAX_RUN_ID, Established, Refused, RunTokens, child_run
from checkpoint.server.single_use import SingleUseStore
from warden import canonical, codes, grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied, Unavailable
from warden.structs import struct_to_dict
from warden.token_keys import KeySet
from warden.tokens import APPROVAL_TOKEN_TTL_SECONDS, RUN_TOKEN_TTL_SECONDS

MAX_LOGGED_ARGUMENT_BYTES = 64 * 1024  # the engine refuses larger arguments; the log keeps their hash

log = logging.getLogger("warden.checkpoint.service")

ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY
KNOWN_VERDICTS = frozenset({pb.VERDICT_ALLOW, pb.VERDICT_DENY, pb.VERDICT_REQUIRE_APPROVAL, pb.VERDICT_HALT})
MAX_BATCH_ITEMS = 256


@dataclass(slots=True)
class _Call:
    """One Check on its way from the wire to the record: what each step of the decision order
    established, for the steps after it."""

    request: pb.CheckRequest
    caller: str
    started: int  # perf_counter_ns at the start: the record's latency
    policies: PolicySet
    now: datetime  # one instant for the whole decision: tokens' lifetimes and both decisions
    action: str | None
    principal: Principal | None = None
    established: Established | None = None
    filled: bool = False
    approval: VerifiedApproval | None = None
    # the answer, set by the decision or by the refusal that stopped it (never read before)
    response: pb.CheckResponse = None  # type: ignore[assignment]
    shadow: tuple[str, str, str] | None = None
    arguments: dict[str, Any] | None = None
    digest: str | None = None
    now_ns: int = 0
    signed_text: CanonicalJson | None = None


class CheckpointService:
    def __init__(
        self,
        store: PolicyStore,
        decisions: DecisionLog,
        key: grants.SigningKey,
        metrics: Metrics,
        single_use: SingleUseStore,
        *,
        max_batch_items: int = MAX_BATCH_ITEMS,
        learnings: LearningStore | None = None,
        token_keys: KeySet | None = None,
        run_token_ttl: float = RUN_TOKEN_TTL_SECONDS,
        approval_token_ttl: float = APPROVAL_TOKEN_TTL_SECONDS,
    ):
        self.store = store
        self.log = decisions
        self.key = key
        # masked audit fields are keyed digests: a card number cannot be brute-forced from the log
        self.mask_key = hmac.new(key.secret, b"warden audit masking v1", hashlib.sha256).digest()
        # tokens expire by the checkpoint's own clock, the one rules read as `now`
        self.token_keys = token_keys or KeySet(None)
        self.runs = RunTokens(self.token_keys, run_token_ttl, self._seconds)
        self.pins = PinnedPolicies()
        self.approvals = Approvals(self.token_keys, self.mask_key, single_use, approval_token_ttl, self._seconds)
        self.single_use = single_use  # also where runs' ends are kept (every worker reads the same), and
        # where a caller's act sent again is taken once (act_id)
        self.metrics = metrics
        self.max_batch_items = max_batch_items
        self._decision_counters: dict[tuple[int, str], Any] = {}
        # set when other processes share the data folder (`serve --workers N`): see shared_state.py
        self.sync_shared: Callable[[], None] | None = None
        self.catalog = CatalogActs(self)
        self.run_acts = RunActs(self)
        self.approval_acts = ApprovalActs(self)
        self.stream = DecisionStream(self)
        self.agent_stats = AgentStatsReads(self)
        # the time rules read as `now`: the checkpoint's own clock, never a caller's (tests fix it)
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.entries = EntryActs(self)  # skills and templates (docs/skills.md)
        store.on_catalog = self._record_catalog_changes
        self.learnings = LearningActs(self, learnings or LearningStore(None))
        store.learnings = self.learnings.index_for  # compiled into every policy set it serves

    def _seconds(self) -> float:
        return self.clock().timestamp()

    # -- decisions -------------------------------------------------------------------------

    def _policies(self) -> PolicySet:
        if self.sync_shared is not None:
            self.sync_shared()  # another worker's catalog or learning act counts from now on
        policies = self.store.current
        if policies is None:
            raise Unavailable("policy_error", "no policy set is loaded; see the checkpoint's health details")
        return policies

    def check(self, request: pb.CheckRequest, caller: str) -> pb.CheckResponse:
        """The decision order itself: who is calling, which run, decide, grant, record, answer.
        Raises InvalidArgument / Unavailable when no decision is possible. `caller` is the
        authenticated identity (`token:NAME`, `mtls:...`, `unix`)."""
        call = _Call(request, caller, time.perf_counter_ns(), self._policies(), self.clock(),
                     request.WhichOneof("action"))
        try:
            self._who_is_calling(call)
            self._which_run(call)
            self._decide(call)
        except Refused as refused:
            call.response = pb.CheckResponse(verdict=DENY, code=refused.code, rule=refused.rule, reason=refused.reason)
        except InvalidRequest as exc:
            self.metrics.refusals.labels(exc.code).inc()
            claimed = forget_claimed_run(request) if call.established is None else ""
            self._record_refusal(request, exc.code, str(exc.message) + claimed, call.policies.revision, caller,
                                 call.principal)
            raise InvalidArgument(exc.code, str(exc.message), exc.field or "") from exc
        except Exception:
            # A crash in the decision function must not become an ALLOW, nor an unrecorded error.
            log.exception("decision function failed")
            call.response = pb.CheckResponse(
                verdict=DENY, code="policy_error", rule="engine", reason="the decision function failed"
            )
        self._settle(call)
        self._grant(call)
        self._record_before_answer(call)
        return call.response

    def _who_is_calling(self, call: _Call) -> None:
        """The principal the caller's credential names, and a request that names a run and an action."""
        call.principal = call.policies.principals.of(call.caller)
        if call.principal is None:
            raise Refused(codes.CALLER_NOT_PERMITTED, no_principal(call.caller), "principal")
        if not call.request.HasField("run"):
            raise InvalidRequest(codes.INVALID_REQUEST, "the request has no run context", "run")
        if call.action is None:
            raise InvalidRequest(codes.INVALID_REQUEST, "the request proposes no action", "action")

    def _which_run(self, call: _Call) -> None:
        """The run the token establishes, alive and not ended, for a principal that may ask for its
        agent; a template tool's call filled as it will run; the approval the request presents."""
        request, principal, at = call.request, call.principal, call.now.timestamp()
        assert principal is not None
        call.established = established = self._establish(request, principal, call.caller, at)
        if not principal.may_check(request.run.tenant, established.agent):
            raise Refused(codes.CALLER_NOT_PERMITTED,
                          f"principal {principal.name!r} may not ask for agent {established.agent!r} "
                          f"of tenant {request.run.tenant!r}", "principal")
        self._refuse_ended(established)
        # a template tool's call is decided, approved, signed and recorded as it will run
        call.filled = fill_arguments(call.policies, request)
        if request.HasField("approval"):
            call.approval = self.approvals.verify(request, at)

    def _decide(self, call: _Call) -> None:
        """The decision under the policy set in force and, when it changed since the run began or since
        its agent version was reviewed, under those revisions too: the stricter stands. Then a delegation's operator, and the
        shadow answer recorded beside it."""
        request, policies, now, established = call.request, call.policies, call.now, call.established
        assert established is not None
        approver = call.approval.approver if call.approval else ""
        approved = call.approval.rules if call.approval else frozenset()
        # the catalog is read here, before decide(), which reads no file nor database
        response = decide(policies, request, approver=approver, approved_rules=approved, now=now,
                          pinned=load_pinned(policies, request))
        pinned_answer = None
        pinned_revision = established.revision
        # the revision the run began under, and the one its agent version was reviewed with: edits
        # since widen neither (each is the current set unless it differs)
        bound = _version_bound(policies, established.run)
        for revision in dict.fromkeys((established.revision, *((bound,) if bound else ()))):
            pinned = self.pins.get(policies, revision)
            if pinned is policies:
                continue
            answer = decide(pinned, request, approver=approver, approved_rules=approved, now=now,
                            pinned=load_pinned(pinned, request))
            if policies.has_shadow:  # stricter() edits its arguments: the shadow gets its own copy
                kept = pb.CheckResponse()
                kept.CopyFrom(answer)
                if pinned_answer is None:
                    pinned_answer, pinned_revision = kept, revision
                else:
                    pinned_answer = stricter(pinned_answer, kept, revision)
            response = stricter(response, answer, revision)
        if call.action == "delegation":
            response = _delegation_needs_operator(policies, request, response, call.principal)
        call.response = response
        if policies.has_shadow:  # recorded beside the answer, never enforced
            call.shadow = _shadow_answer(policies, request, approver, approved, now, pinned_answer,
                                         pinned_revision, call.principal)

    def _settle(self, call: _Call) -> None:
        """The answer made whole: a known verdict, its revision, the digest of an approved call, and
        the approval spent on an ALLOW (once, before the record)."""
        request, approval = call.request, call.approval
        if call.established is None:  # refused before the run was established: file it under no run
            call.response.reason += forget_claimed_run(request)
        self.metrics.decision_seconds.observe((time.perf_counter_ns() - call.started) / 1e9)
        if call.response.verdict not in KNOWN_VERDICTS:
            call.response = _fail_closed(
                call.response, "policy_error", "the decision function gave no verdict", rule="engine"
            )
        if not call.response.policy_revision:
            call.response.policy_revision = call.policies.revision
        # converted once: the approval digest, the grant and the record all read these
        call.arguments = _tool_arguments(request, call.action)
        verdict = call.response.verdict
        if verdict == pb.VERDICT_REQUIRE_APPROVAL or (approval is not None and verdict == ALLOW):
            call.digest = self.approvals.digest(request, call.response, call.action)
        if approval is not None and verdict == ALLOW:
            assert call.digest is not None
            call.response = self._spend(approval, request, call.response, call.digest)

    def _grant(self, call: _Call) -> None:
        """The decision's id and time; an allowed delegation's child run; an allowed tool call's grant."""
        request, response = call.request, call.response
        call.now_ns = now_ns = time.time_ns()
        response.decision_id = new_decision_id()
        convert.timestamp_from_ns(now_ns, response.decided_at)
        if response.verdict == ALLOW and call.action == "delegation" and call.principal is not None \
                and call.established:
            self._child_run(call.policies, request, response, call.principal, call.established)
        # a grant binds a pinned agent version: a person acting directly is decided and
        # recorded, but the toolrunner runs agents' calls only
        if call.arguments is not None and response.verdict == ALLOW and response.agent_version:
            try:
                call.signed_text = self._sign(call.policies, request, response, call.arguments)
            except (ValueError, TypeError) as exc:  # e.g. NaN: no canonical form, no grant
                call.response = _fail_closed(
                    response, "invalid_arguments", f"arguments cannot be signed: {exc}", rule="grant"
                )
        if call.filled and call.response.HasField("grant"):  # what the grant covers: the caller sends these
            call.response.arguments.CopyFrom(request.tool_call.arguments)

    def _record_before_answer(self, call: _Call) -> None:
        """The record committed before the answer leaves; an answer whose record cannot be committed
        becomes DENY `audit_unavailable`."""
        response, principal, approval = call.response, call.principal, call.approval
        record = self._record(call.request, response, call.action, call.arguments, call.policies, call.now_ns,
                              call.established, call.signed_text)
        record.latency_us = (time.perf_counter_ns() - call.started) // 1000
        record.caller = caller_name(call.caller)
        record.principal = principal.name if principal is not None else None
        record.call_digest = call.digest
        record.approval_rules = ",".join(response.approval_rules) or None
        if call.shadow is not None:
            record.shadow_verdict, record.shadow_code, record.shadow_rule = call.shadow
        if approval is not None:  # a verified approval: who approved, and which approval record (spent on an ALLOW)
            record.approver, record.approval_id = approval.approver, approval.approval_id or None
        # every string of a record before the run was established came from a caller nobody vouched for
        self._append_or_deny(record if call.established is not None else bound_refusal(record), response)
        self._count(response.verdict, response.code)
        if response.learnings or response.verdict == pb.VERDICT_HALT:
            self.learnings.after_check(call.request, response)  # triggers; a breaker proposes a learning

    def _establish(self, request: Any, principal: Principal, caller: str, at: float | None = None) -> Established:
        """The run the request's token establishes (its run context replaced by the token's), if
        the token was issued to this principal (and, when it binds one, to this credential), alive
        at `at` (default: now)."""
        established = self.runs.establish(request, at)
        if established.principal != principal.name or established.caller not in ("", caller):
            raise Refused(codes.RUN_TOKEN_INVALID, "the run token was issued to another caller", "run_token")
        return established

    def _refuse_ended(self, established: Established) -> None:
        """Refused `run_ended` when the run, or any run it descends from, ended or was cancelled. The
        driver stops such a run itself, but it is not trusted for authority: the checkpoint's own
        store says whether a run may still act, and a store that cannot say refuses."""
        run = established.run
        ids = [run.run_id, run.parent_run_id, run.root_run_id, *(link.run_id for link in run.actor_chain)]
        try:
            found = self.single_use.ended(ids)
        except Exception as exc:  # noqa: BLE001 - fail closed, and say why
            raise Refused(codes.RUN_STATE_UNAVAILABLE, f"whether the run ended cannot be read: {str(exc)[:200]}",
                          "run_token") from None
        if found is not None:
            ended, how = found
            whose = f"run {ended}" if ended == run.run_id else f"run {run.run_id} descends from run {ended}, which"
            raise Refused(codes.RUN_ENDED, f"{whose} ended ({how[:200]}): it acts no more", "run_token")

    def _end_run(self, established: Established, how: str) -> None:
        """Mark the run ended in the shared store before its act is answered: from that answer on,
        no worker allows anything of it or of the runs it started."""
        try:
            self.single_use.end_run(established.run.run_id, how)
        except Exception as exc:  # noqa: BLE001
            raise Refused(codes.RUN_STATE_UNAVAILABLE, f"the run's end cannot be kept: {str(exc)[:200]}",
                          "run_token") from None

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

    def append(self, record: DecisionRecord | dict[str, Any]) -> int:
        """Append a record to the decision log, with the trace id of the call being served (the
        `traceparent` its caller sent, read once per RPC by the gRPC layer: checkpoint/server/tracing.py)."""
        if isinstance(record, DecisionRecord):
            if record.trace_id is None:
                record.trace_id = tracing.current.get()
        elif record.get("trace_id") is None:
            record["trace_id"] = tracing.current.get()
        return self.log.append(record)

    def _append_or_deny(self, record: DecisionRecord | dict[str, Any], response: Any) -> None:
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






    def _record_catalog_changes(self, policies: PolicySet) -> None:
        """A load applied or proposed policy files' agent changes: each goes on the record. Best
        effort: the files changed on the operator's disk whatever the log says."""
        for change in policies.catalog_changes:
            response = pb.CheckResponse(verdict=ALLOW, rule="catalog", policy_revision=policies.revision,
                                        code=codes.PROPOSED if change.act == "propose" else codes.CATALOG_CHANGED,
                                        reason=f"{change.act} {getattr(change, 'label', change.agent)} "
                                               f"{change.version} from {change.source}")
            record = act_record(response, stamp(response), policies, change.by, None, tenant=change.tenant,
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
            arguments=_logged_arguments(request, response, action, arguments, policies, self.mask_key,
                                           signed_text),
            verdict=convert.verdict_name(response.verdict),
            code=response.code,
            rule=response.rule or None,
            reason=response.reason or None,
            policy_revision=response.policy_revision or None,
        )

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
        record.caller = caller_name(caller) if caller else None
        record.principal = principal.name if principal is not None else None
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
            claimed = forget_claimed_run(item)
            self._record_refusal(item, "unauthenticated", f"{method}: no valid credentials{claimed}", revision)

    # -- the decision stream ---------------------------------------------------------------


    # -- token keys ------------------------------------------------------------------------

    def token_keys_rpc(self, request: pb.TokenKeysRequest, caller: str) -> pb.TokenKeysResponse:
        """The public set that verifies run and approval tokens: public by nature, so any caller
        that got past authentication reads it. Not recorded."""
        out = pb.TokenKeysResponse()
        for key in self.token_keys.published():
            out.keys.add(key_id=key.key_id, algorithm="Ed25519", public_key_pem=key.pem, active=key.active)
        return out

    # -- roles -----------------------------------------------------------------------------

    def roles(self, request: pb.RolesRequest, caller: str) -> pb.RolesResponse:
        """A person's roles per tenant, for a caller that may vouch for them (the driver asks
        before each operator action). A read of the policy files: not recorded."""
        policies = self._policies()
        if not request.person or len(request.person) > MAX_RUN_ID:
            raise InvalidArgument(codes.INVALID_REQUEST, f"name the person (1 to {MAX_RUN_ID} characters)", "person")
        principal = policies.principals.of(caller)
        if principal is None:
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, no_principal(caller))
        if not principal.may_vouch(request.person, caller_name(caller)):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"principal {principal.name!r} may not vouch for person {request.person[:100]!r}",
                                   "person")
        out = pb.RolesResponse(person=request.person, policy_revision=policies.revision)
        for tenant, held in roles_by_tenant(policies.tenants, request.person).items():
            out.tenants.add(tenant=tenant, roles=held, roles_declared=policies.tenants[tenant].roles is not None)
        return out





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
        shadow = decide(policies.shadow(), request, approver=approver, approved_rules=approved, now=now,
                        pinned=load_pinned(policies, request))
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
    """A tool call's arguments as plain values, else None (unchecked: the decision refused what it must)."""
    return struct_to_dict(request.tool_call.arguments, checked=False) if action == "tool_call" else None


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
