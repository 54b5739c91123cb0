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

from checkpoint.audit.bounded import bound_refusal
from checkpoint.audit.port import DecisionLogStore
from checkpoint.audit.record import CanonicalJson, DecisionRecord, json_column
from checkpoint.engine import InvalidRequest, decide
from checkpoint.policy import PolicySet
from checkpoint.policy.learnings import LearningStore
from checkpoint.policy.limits import NOTHING as NO_USAGE
from checkpoint.policy.limits import LimitUsage
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.server import convert
from checkpoint.server.act_records import forget_claimed_run
from checkpoint.server.agent_stats import AgentStatsReads
from checkpoint.server.answers import (
    delegation_needs_operator,
    fail_closed,
    shadow_answer,
    version_bound,
)
from checkpoint.server.approval_acts import ApprovalActs
from checkpoint.server.approvals import Approvals, VerifiedApproval, stamp_deadline
from checkpoint.server.catalog_acts import CatalogActs
from checkpoint.server.check_records import check_record, tool_arguments
from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState
from checkpoint.server.decision_stream import DecisionStream
from checkpoint.server.entry_acts import EntryActs, fill_arguments, pins
from checkpoint.server.ids import new_decision_id, new_run_id
from checkpoint.server.learning_acts import LearningActs
from checkpoint.server.limit_counts import LimitCounts
from checkpoint.server.limit_store import LimitStore
from checkpoint.server.metrics import Metrics
from checkpoint.server.notifier import Notifier
from checkpoint.server.pins import PinnedPolicies, stricter
from checkpoint.server.queries import ReadOnlyQueries
from checkpoint.server.refusals import no_principal
from checkpoint.server.refused_requests import RefusedRequests
from checkpoint.server.reload import PolicyStore
from checkpoint.server.run_acts import RunActs
from checkpoint.server.runs import Established, Refused, RunTokens, child_run
from checkpoint.server.single_use import SingleUseStore
from warden import codes, grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, Unavailable
from warden.token_keys import KeySet
from warden.tokens import APPROVAL_TOKEN_TTL_SECONDS, RUN_TOKEN_TTL_SECONDS

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
    usage: LimitUsage = NO_USAGE  # the limits' counts the decision read (limit_counts.py)
    counted: bool = False  # this call was counted in its limits: given back if the answer is no ALLOW


class CheckpointService:
    def __init__(
        self,
        store: PolicyStore,
        decisions: DecisionLogStore,
        key: grants.SigningKey,
        metrics: Metrics,
        single_use: SingleUseStore,
        *,
        max_batch_items: int = MAX_BATCH_ITEMS,
        learnings: LearningStore | None = None,
        token_keys: KeySet | None = None,
        run_token_ttl: float = RUN_TOKEN_TTL_SECONDS,
        approval_token_ttl: float = APPROVAL_TOKEN_TTL_SECONDS,
        limits: LimitStore | None = None,
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
        # the counts of the limits across runs (stores.py: limits.db, or the table a fleet shares)
        self.limit_counts = LimitCounts(limits)
        self.max_batch_items = max_batch_items
        # the collaborators every act is handed (collaborators.py): nothing else of the service
        self.in_force = PoliciesInForce(store)
        self.recorder = Recorder(decisions, metrics)
        self.run_state = RunState(self.runs, single_use)
        self.catalog = CatalogActs(self.in_force, self.recorder, self.run_state)
        self.approval_acts = ApprovalActs(self.in_force, self.recorder, self.approvals, self._policies_of)
        self.run_acts = RunActs(self.in_force, self.recorder, self.run_state, self.approval_acts.expire)
        self.stream = DecisionStream(self.in_force, decisions)
        self.agent_stats = AgentStatsReads(self.in_force, decisions)
        self.queries = ReadOnlyQueries(self.in_force, self.token_keys)
        self.refused = RefusedRequests(store, self.recorder, self.mask_key)
        # the wire layer records what it refuses before any decision through these
        self.record_malformed = self.refused.malformed
        self.record_unauthenticated = self.refused.unauthenticated
        # the time rules read as `now`: the checkpoint's own clock, never a caller's (tests fix it)
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.entries = EntryActs(self.in_force, self.recorder, self.run_state)  # skills and templates (docs/skills.md)
        store.on_catalog = self.catalog.record_file_changes
        self.learnings = LearningActs(self.in_force, self.recorder, self.run_state, learnings or LearningStore(None))
        self.notifier: Notifier | None = None  # webhooks (create_server's `notify`): told after the record
        store.learnings = self.learnings.index_for  # compiled into every policy set it serves

    @property
    def sync_shared(self) -> Callable[[], None] | None:
        """Set when other processes share the data folder (`serve --workers N`): see shared_state.py."""
        return self.in_force.sync_shared

    @sync_shared.setter
    def sync_shared(self, sync: Callable[[], None] | None) -> None:
        self.in_force.sync_shared = sync

    def _seconds(self) -> float:
        return self.clock().timestamp()

    def _policies_of(self, revision: str) -> PolicySet:
        """The policy set of `revision` (an approval's deadline is its rules' there), or the one in
        force when that revision no longer compiles."""
        current = self.in_force.current()
        try:
            return self.pins.get(current, revision) if revision else current
        except Refused:
            return current

    def append(self, record: DecisionRecord | dict[str, Any]) -> int:
        """Append a record to the decision log, with the trace id of the call being served."""
        return self.recorder.append(record)

    # -- one Check: who is calling, which run, decide, grant, record, answer ---------------------

    def check(self, request: pb.CheckRequest, caller: str) -> pb.CheckResponse:
        """The decision order itself: who is calling, which run, decide, grant, record, answer.
        Raises InvalidArgument / Unavailable when no decision is possible. `caller` is the
        authenticated identity (`token:NAME`, `mtls:...`, `unix`)."""
        call = _Call(request, caller, time.perf_counter_ns(), self.in_force.current(), self.clock(),
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
            self.refused.record(request, exc.code, str(exc.message) + claimed, call.policies.revision, caller,
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
        if call.counted and call.response.verdict != ALLOW:  # a refused call spends nothing
            self.limit_counts.refund(call.usage)
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
        call.established = established = self.run_state.establish(request, principal, call.caller, at)
        if not principal.may_check(request.run.tenant, established.agent):
            raise Refused(codes.CALLER_NOT_PERMITTED,
                          f"principal {principal.name!r} may not ask for agent {established.agent!r} "
                          f"of tenant {request.run.tenant!r}", "principal")
        self.run_state.refuse_ended(established)
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
        # the catalog is read here, before decide(), which reads no file nor database; on a shared
        # store, only a catalog known current is decided on
        self.in_force.require_current_catalog()
        # the limits' counts too, from their store (shared by every replica on PostgreSQL)
        assert call.principal is not None
        call.usage = usage = self.limit_counts.read(policies, request, call.principal.name, established, now)
        response = decide(policies, request, approver=approver, approved_rules=approved, now=now,
                          pinned=self.in_force.pinned_versions(policies, request), limits=usage)
        pinned_answer = None
        pinned_revision = established.revision
        # the revision the run began under, and the one its agent version was reviewed with: edits
        # since widen neither (each is the current set unless it differs)
        bound = version_bound(policies, established.run)
        for revision in dict.fromkeys((established.revision, *((bound,) if bound else ()))):
            pinned = self.pins.get(policies, revision)
            if pinned is policies:
                continue
            answer = decide(pinned, request, approver=approver, approved_rules=approved, now=now,
                            pinned=self.in_force.pinned_versions(pinned, request), limits=usage)
            if policies.has_shadow:  # stricter() edits its arguments: the shadow gets its own copy
                kept = pb.CheckResponse()
                kept.CopyFrom(answer)
                if pinned_answer is None:
                    pinned_answer, pinned_revision = kept, revision
                else:
                    pinned_answer = stricter(pinned_answer, kept, revision)
            response = stricter(response, answer, revision)
        if call.action == "delegation":
            response = delegation_needs_operator(policies, request, response, call.principal)
        call.response = response
        if policies.has_shadow:  # recorded beside the answer, never enforced
            call.shadow = shadow_answer(policies, request, approver, approved, now, pinned_answer,
                                         pinned_revision, call.principal, usage)

    def _settle(self, call: _Call) -> None:
        """The answer made whole: a known verdict, its revision, the digest of an approved call, and
        the approval spent on an ALLOW (once, before the record)."""
        request, approval = call.request, call.approval
        if call.established is None:  # refused before the run was established: file it under no run
            call.response.reason += forget_claimed_run(request)
        self.metrics.decision_seconds.observe((time.perf_counter_ns() - call.started) / 1e9)
        if call.response.verdict not in KNOWN_VERDICTS:
            call.response = fail_closed(
                call.response, "policy_error", "the decision function gave no verdict", rule="engine"
            )
        if not call.response.policy_revision:
            call.response.policy_revision = call.policies.revision
        # converted once: the approval digest, the grant and the record all read these
        call.arguments = tool_arguments(request, call.action)
        verdict = call.response.verdict
        if verdict == pb.VERDICT_REQUIRE_APPROVAL or (approval is not None and verdict == ALLOW):
            call.digest = self.approvals.digest(request, call.response, call.action)
        if verdict == ALLOW:  # counted before the approval is spent: a call the count refuses spends neither
            call.response, call.counted = self.limit_counts.count(call.usage, call.now, call.response)
        if approval is not None and call.response.verdict == ALLOW:
            assert call.digest is not None
            call.response = self._spend(approval, request, call.response, call.digest)

    def _grant(self, call: _Call) -> None:
        """The decision's id and time; an allowed delegation's child run; an allowed tool call's grant."""
        request, response = call.request, call.response
        call.now_ns = now_ns = time.time_ns()
        response.decision_id = new_decision_id()
        convert.timestamp_from_ns(now_ns, response.decided_at)
        if response.verdict == pb.VERDICT_REQUIRE_APPROVAL:  # as Approve computes it again from the record
            revision = response.policy_revision
            stamp_deadline(response, self._policies_of(revision) if revision else call.policies, now_ns)
        if response.verdict == ALLOW and call.action == "delegation" and call.principal is not None \
                and call.established:
            self._child_run(call.policies, request, response, call.principal, call.established)
        # a grant binds a pinned agent version: a person acting directly is decided and
        # recorded, but the toolrunner runs agents' calls only
        if call.arguments is not None and response.verdict == ALLOW and response.agent_version:
            try:
                call.signed_text = self._sign(call.policies, request, response, call.arguments)
            except (ValueError, TypeError) as exc:  # e.g. NaN: no canonical form, no grant
                call.response = fail_closed(
                    response, "invalid_arguments", f"arguments cannot be signed: {exc}", rule="grant"
                )
        if call.filled and call.response.HasField("grant"):  # what the grant covers: the caller sends these
            call.response.arguments.CopyFrom(request.tool_call.arguments)

    def _record_before_answer(self, call: _Call) -> None:
        """The record committed before the answer leaves; an answer whose record cannot be committed
        becomes DENY `audit_unavailable`."""
        response, principal, approval = call.response, call.principal, call.approval
        record = check_record(call.request, response, call.action, call.arguments, call.policies, call.now_ns,
                              self.mask_key, call.established, call.signed_text)
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
        recorded = self.recorder.append_or_deny(record if call.established is not None else bound_refusal(record),
                                                response)
        self.recorder.count(response.verdict, response.code)
        if call.shadow is not None and recorded:  # only with shadow rules in force; a flip not recorded is none
            self.recorder.count_shadow_flip(record.verdict or "", record.code or "", call.shadow)
        if self.notifier is not None and call.established is not None:
            self.notifier.offer_recorded(record, response)  # after the record, never instead of it
        if response.learnings or response.verdict == pb.VERDICT_HALT:
            self.learnings.after_check(call.request, response)  # triggers; a breaker proposes a learning

    # -- the steps' own parts: an approval spent, a child run, a grant ------------------------

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
        return fail_closed(response, codes.APPROVAL_INVALID, problem, rule="approval")

    def _child_run(self, policies: PolicySet, request: pb.CheckRequest, response: pb.CheckResponse,
                   principal: Principal, parent: Established) -> None:
        """An allowed delegation mints the child's run id and its run token: for the same principal,
        pinned to the parent's revision (a child never gets what an edit since its parent began added)."""
        child = policies.agent_version(request.delegation.agent, response.child_agent_version)
        run_id = new_run_id()
        run = child_run(request.run, request, response, run_id, child.tenant if child else request.run.tenant)
        response.child_run_id = run_id
        # the child pins the skills its own agent lists, as they are now (docs/skills.md)
        response.child_run_token = self.run_state.tokens.issue(run, principal.name, parent.revision, parent.caller,
                                                               pins(policies, child))

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

    # -- a plan, and many Checks in one call ---------------------------------------------------

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
        self.in_force.current()  # no policies: the whole batch is unavailable, not each item
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

