"""The learnings' RPCs (docs/learnings.md): propose, review, list, and a run's lessons.

Who may do what. A proposal comes with a run token: the driver reports a failed run or a failed
task, or relays its agent's own proposal (a built-in action, never a tool); a breaker's HALT
proposes one here, after its record. Every proposal holds severity `warning` at most, whatever
the proposer asked. A tenant admin (their own credential, `roles.admin`) promotes a proposal,
choosing severity and match, re-reviews or edits an active or stale learning, rejects or retires
one. Reads need a role in the tenant, or a process principal that covers it.

Every act is a record in the decision log (action `learning`) written before it takes effect; a
refusal is recorded too. After a change the policy store compiles the active learnings again, so
the next Check decides with them (`PolicyStore.refresh`).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

from checkpoint.policy import PolicySet
from checkpoint.policy.learning_index import SEVERITIES, LearningIndex, MatchError, build_index, compile_match
from checkpoint.policy.learnings import (
    MAX_TEXT,
    STATUSES,
    SWEEPER,
    LearningChange,
    LearningError,
    LearningStore,
    Proposal,
    iso,
)
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.policy.roles import role_refusal, roles_of
from checkpoint.server import convert
from checkpoint.server.act_records import LearningAct, stamp
from checkpoint.server.recorded_acts import perform
from checkpoint.server.runs import Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied

if TYPE_CHECKING:
    from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState

ALLOW, DENY, HALT = pb.VERDICT_ALLOW, pb.VERDICT_DENY, pb.VERDICT_HALT
log = logging.getLogger("warden.checkpoint.learnings")
SOURCES = {pb.LEARNING_SOURCE_RUN_FAILED: "run_failed", pb.LEARNING_SOURCE_TASK_FAILED: "task_failed",
           pb.LEARNING_SOURCE_AGENT: "agent"}
ACTS = {pb.LEARNING_ACT_PROMOTE: "promote", pb.LEARNING_ACT_REVIEW: "review", pb.LEARNING_ACT_REJECT: "reject",
        pb.LEARNING_ACT_RETIRE: "retire"}
CHECKPOINT = "checkpoint"  # who proposes a breaker's learning
SWEEP_SECONDS = 3600.0


def learning_info(row: dict[str, Any]) -> pb.LearningInfo:
    info = pb.LearningInfo(occurrences=row["occurrences"] or 0, triggers=row["triggers"] or 0,
                           severity_capped=bool(row["severity_capped"]))
    for name in ("id", "tenant", "agent", "agent_version", "tool", "status", "source", "code", "text", "severity",
                 "match", "suggested_match", "proposed_by", "reviewed_by", "review_note"):
        setattr(info, name, row[name] or "")
    for name in ("proposed_at", "reviewed_at", "last_occurrence_at", "last_triggered_at", "stale_at"):
        setattr(info, name, iso(row[name]))
    for seen in row["provenance"]:
        info.provenance.add(**{k: str(v or "") for k, v in seen.items() if k in pb.LearningProvenance.DESCRIPTOR.fields_by_name})
    return info


def suggested_match(policies: PolicySet, tool: str) -> str:
    """A starting point for the admin: the tool the occurrence concerned, when the policies know it."""
    return f"tool.name == {json.dumps(tool)}" if tool and tool in policies.tools else ""


class LearningActs:
    def __init__(self, in_force: PoliciesInForce, recorder: Recorder, run_state: RunState, store: LearningStore):
        self.in_force = in_force
        self.recorder = recorder
        self.run_state = run_state
        self.store = store
        self._programs: dict[tuple[str, str], Any] = {}  # (engine, match) -> compiled program
        self._stop = threading.Event()
        self._sweeper: threading.Thread | None = None

    # -- what decide() reads ---------------------------------------------------------------

    def index_for(self, policies: PolicySet) -> LearningIndex:
        """The active learnings compiled for `policies`' CEL engine (PolicyStore calls this)."""
        index = build_index(self.store.acting(), policies.cel_engine, self._programs)
        for problem in index.problems:
            log.error("an active learning does not act: %s", problem)
        return index

    # -- around a Check ----------------------------------------------------------------------

    def after_check(self, request: pb.CheckRequest, response: pb.CheckResponse) -> None:
        """After a Check's record is committed: the learnings in its answer were triggered, and a
        breaker's HALT proposes a learning. Best effort: the answer stands whatever happens here."""
        try:
            if response.learnings:
                self.store.triggered([n.id for n in response.learnings])
            if response.verdict == HALT and response.code.startswith("breaker_") and response.agent:
                self._from_breaker(request, response)
        except Exception:  # noqa: BLE001 - advice must never change or fail an answer
            log.exception("learnings after decision %s", response.decision_id)

    def _from_breaker(self, request: pb.CheckRequest, response: pb.CheckResponse) -> None:
        policies = self.in_force.current()
        run = request.run
        tool = request.tool_call.tool if request.WhichOneof("action") == "tool_call" else ""
        breaker = response.code.removeprefix("breaker_")
        proposal = Proposal(
            tenant=response.tenant, agent=response.agent, agent_version=response.agent_version, source="breaker",
            code=response.code, by=CHECKPOINT, run_id=run.run_id, decision_id=response.decision_id, tool=tool,
            text=f"A run of {response.agent} tripped the {breaker} breaker: {response.reason}",
            suggested_match=suggested_match(policies, tool))
        fields = _run_fields(run)

        def record(change: LearningChange) -> None:
            self._write(self._record(_answer(change, codes.LEARNING_PROPOSED), policies, CHECKPOINT, None, change,
                                     fields), raise_on_failure=False)

        self.store.propose(proposal, record=record)

    # -- proposals -----------------------------------------------------------------------------

    def propose_learning(self, request: pb.ProposeLearningRequest, caller: str) -> pb.LearningActResponse:
        def act(policies: PolicySet, principal: Principal, record: Any, fields: dict[str, Any]) -> Any:
            source = SOURCES.get(request.source)
            if source is None:
                raise Refused(codes.INVALID_REQUEST, "source must be RUN_FAILED, TASK_FAILED or AGENT (a breaker's "
                              "learning is proposed by the checkpoint itself)", "learning.source")
            if not request.HasField("run"):
                raise Refused(codes.INVALID_REQUEST, "a proposal comes with its run's token", "learning.run")
            check = pb.CheckRequest(run=request.run)
            established = self.run_state.establish(check, principal, caller)
            run = check.run
            fields.update(_run_fields(run))
            chain = fields["actor_chain"]
            if not established.agent or not principal.may_check(run.tenant, established.agent):
                raise Refused(codes.CALLER_NOT_PERMITTED, f"run {run.run_id!r} names no agent this caller may "
                              "propose learnings for", "learning.run")
            acting = chain[-1]
            fields.update(tenant=run.tenant, agent=acting["id"], agent_version=acting.get("agent_version", ""))
            if len(request.text) > MAX_TEXT:
                raise Refused(codes.INVALID_REQUEST, f"the text is longer than {MAX_TEXT} characters", "learning.text")
            if request.severity and request.severity not in SEVERITIES:
                raise Refused(codes.INVALID_REQUEST, f"severity must be {' or '.join(SEVERITIES)}", "learning.severity")
            if request.decision_id and not any(r["decision_id"] == request.decision_id
                                               for r in self.recorder.read(run_id=run.run_id)):
                # provenance is the checkpoint's own record of this run, never a decision the caller names
                raise Refused(codes.INVALID_REQUEST, f"decision {request.decision_id[:64]!r} is not a decision of "
                              f"run {run.run_id!r}", "learning.decision_id")
            by = (f"agent:{acting['id']}@{acting.get('agent_version', '')}" if source == "agent"
                  else caller_name(caller))
            tool = request.tool[:100]
            return self.store.propose(Proposal(
                tenant=run.tenant, agent=acting["id"], agent_version=acting.get("agent_version", ""), source=source,
                code=request.code[:100], text=request.text, by=by, run_id=run.run_id,
                decision_id=request.decision_id[:64], tool=tool, severity=request.severity or "warning",
                suggested_match=suggested_match(policies, tool)), record=record)

        return self._act("propose", act, codes.LEARNING_PROPOSED, caller)

    # -- a person's acts ---------------------------------------------------------------------------

    def review_learning(self, request: pb.ReviewLearningRequest, caller: str) -> pb.LearningActResponse:
        name = ACTS.get(request.act, "review")

        def act(policies: PolicySet, principal: Principal, record: Any, fields: dict[str, Any]) -> Any:
            fields["learning"] = request.id[:40]
            if request.act not in ACTS:
                raise Refused(codes.INVALID_REQUEST, "act must be PROMOTE, REVIEW, REJECT or RETIRE", "learning.act")
            found = self.store.get(request.id) if request.id else None
            if found is None:
                raise Refused(codes.UNKNOWN_LEARNING, f"no learning {request.id[:40]!r}", "learning.id")
            fields.update(tenant=found["tenant"], agent=found["agent"], agent_version=found["agent_version"])
            by = self._admin(policies, principal, caller, found["tenant"])
            if request.match:  # type-checked like a rule's condition, errors with the position
                try:
                    compile_match(request.match, policies.cel_engine)
                except MatchError as exc:
                    raise Refused(codes.INVALID_REQUEST, f"<learning {found['id']}> {exc}", "learning.match") from None
            if len(request.text) > MAX_TEXT:
                raise Refused(codes.INVALID_REQUEST, f"the text is longer than {MAX_TEXT} characters", "learning.text")
            return self.store.act(found["id"], name, by=by, severity=request.severity, match=request.match,
                                  text=request.text, note=request.note, record=record)

        return self._act(name, act, codes.LEARNING_CHANGED, caller)

    # -- reads -------------------------------------------------------------------------------

    def list_learnings(self, request: pb.ListLearningsRequest, caller: str) -> pb.ListLearningsResponse:
        policies = self.in_force.current()
        if request.status and request.status not in STATUSES:
            raise InvalidArgument(codes.INVALID_REQUEST, f"status must be one of {', '.join(STATUSES)}", "status")
        self.sweep()
        if request.id:
            found = self.store.get(request.id)
            rows = [found] if found is not None else []
        else:
            rows = self.store.rows(tenant=request.tenant, agent=request.agent, status=request.status)
        readable: dict[str, bool] = {}
        out = pb.ListLearningsResponse()
        for row in rows:
            tenant = row["tenant"]
            if tenant not in readable:
                readable[tenant] = self._may_read(policies, caller, tenant)
            if readable[tenant]:
                out.learnings.append(learning_info(row))
        return out

    def run_lessons(self, request: pb.RunLessonsRequest, caller: str) -> pb.RunLessonsResponse:
        """The active learnings about the run's agent, for its model context."""
        policies = self.in_force.current()
        principal = policies.principals.of(caller)
        check = pb.CheckRequest(run=request.run)
        try:
            if principal is None:
                raise Refused(codes.CALLER_NOT_PERMITTED, "no principal", "principal")
            established = self.run_state.establish(check, principal, caller)
        except Refused as refused:
            raise PermissionDenied(refused.code, refused.reason, "run") from None
        agent, tenant = established.agent, check.run.tenant
        if not agent or not principal.may_check(tenant, agent):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, "the run names no agent this caller may ask for", "run")
        acting = {a.id for a in policies.learnings.for_call(tenant, agent) if a.agent == agent}
        rows = [r for r in self.store.acting() if r["id"] in acting]
        return pb.RunLessonsResponse(lessons=[learning_info(r) for r in rows])

    # -- going stale -------------------------------------------------------------------------

    def sweep(self) -> list[LearningChange]:
        """Move learnings nothing triggered for 90 days to stale, record it, and stop them acting."""
        policies = self.in_force.current()

        def record(change: LearningChange) -> None:
            self._write(self._record(_answer(change, codes.LEARNING_CHANGED), policies, SWEEPER, None, change, {}),
                        raise_on_failure=False)

        changes = self.store.sweep(record=record)
        if changes:
            self.in_force.refresh()
        return changes

    def start(self, every: float = SWEEP_SECONDS) -> None:
        def run() -> None:
            while not self._stop.wait(every):
                try:
                    self.sweep()
                except Exception:  # noqa: BLE001 - the next round tries again
                    log.exception("learnings sweep failed")

        self._sweeper = threading.Thread(target=run, name="learnings-sweep", daemon=True)
        self._sweeper.start()

    def stop(self) -> None:
        self._stop.set()
        if self._sweeper is not None and self._sweeper.is_alive():
            self._sweeper.join(timeout=5)
        self.store.flush()

    # -- the act, its record ------------------------------------------------------------------

    def _act(self, name: str, act: Any, code: str, caller: str) -> pb.LearningActResponse:
        """Check and do one act; record it (ALLOW) before it is written, or record its refusal."""

        def answer(response: pb.CheckResponse, change: LearningChange) -> None:
            words = _answer(change, code)
            response.verdict, response.code, response.reason = words.verdict, words.code, words.reason

        def record_of(response: pb.CheckResponse, policies: PolicySet, principal: Principal | None,
                      fields: dict[str, Any], change: LearningChange | None) -> dict[str, Any]:
            if change is None:  # a refusal, filed under what the act had found out
                change = LearningChange(name, fields.get("learning", ""), fields.get("tenant", ""),
                                        fields.get("agent", ""), fields.get("agent_version", ""), caller_name(caller))
            return self._record(response, policies, caller_name(caller), principal, change, fields)

        done = perform(self.in_force, self.recorder, caller, name, "learning", act, answer=answer, record_of=record_of,
                       store_errors=(LearningError,))
        out = pb.LearningActResponse(decision=done.response)
        if done.result is not None:
            _change, row = done.result
            if row is not None:
                if name != "propose":  # what acts changed: the next Check decides with it
                    self.in_force.refresh()
                out.learning.CopyFrom(learning_info(row))
        return out

    def _record(self, response: pb.CheckResponse, policies: PolicySet, caller: str, principal: Principal | None,
                change: LearningChange, fields: dict[str, Any]) -> dict[str, Any]:

        return LearningAct.answering(
            response, stamp(response), policies, caller, principal,
            tenant=change.tenant or fields.get("tenant") or None,
            agent=change.agent or fields.get("agent") or None,
            agent_version=change.agent_version or fields.get("agent_version") or None,
            run_id=fields.get("run_id"), root_run_id=fields.get("root_run_id"),
            parent_run_id=fields.get("parent_run_id"), actor_chain=fields.get("actor_chain"),
            accountable_person=fields.get("accountable_person"),
            action="learning", arguments={**change.arguments(), "by": change.by}
        ).to_dict()

    def _write(self, entry: dict[str, Any], *, raise_on_failure: bool) -> None:
        try:
            self.recorder.append(entry)
        except Exception as exc:
            self.recorder.metrics.audit_failures.inc()
            if raise_on_failure:
                raise
            log.error("learning act %s not recorded: %s", entry.get("arguments", {}).get("act"), exc)
            return
        self.recorder.count(ALLOW, entry["code"])

    # -- who -----------------------------------------------------------------------------------

    @staticmethod
    def _admin(policies: PolicySet, principal: Principal, caller: str, tenant: str) -> str:
        """The person acting with their own credential, an admin of `tenant`."""
        person = caller_name(caller)
        if not principal.acts_as_self or not principal.covers(tenant):
            raise Refused(codes.CALLER_NOT_PERMITTED, f"{person!r} (principal {principal.name!r}) may not review "
                          f"the learnings of tenant {tenant!r}: a person's own credential is needed", "principal")
        refusal = role_refusal(policies.tenants, tenant, person, "admin")
        if refusal is not None:
            raise Refused(codes.ROLE_REQUIRED, refusal, "role:admin")
        return person

    @staticmethod
    def _may_read(policies: PolicySet, caller: str, tenant: str) -> bool:
        principal = policies.principals.of(caller)
        if principal is None or not principal.covers(tenant):
            return False
        return not principal.acts_as_self or bool(roles_of(policies.tenants.get(tenant), caller_name(caller)))


def _answer(change: LearningChange, code: str) -> pb.CheckResponse:
    what = {"propose": "proposed", "occurrence": "counted again", "promote": "promoted", "review": "reviewed",
            "reject": "rejected", "retire": "retired", "stale": "went stale"}.get(change.act, change.act)
    extra = ""
    if change.act in ("promote", "review"):
        extra = f" ({change.details.get('severity')}: {str(change.details.get('match'))[:200]})"
    return pb.CheckResponse(verdict=ALLOW, code=code, rule="learning",
                            reason=f"learning {change.learning} {what} by {change.by}{extra}")


def _run_fields(run: pb.RunContext) -> dict[str, Any]:
    chain = convert.actor_chain(run.actor_chain)
    return {"run_id": run.run_id or None, "root_run_id": run.root_run_id or run.run_id or None,
            "parent_run_id": run.parent_run_id or None, "actor_chain": chain or None,
            "accountable_person": chain[0]["id"] if chain else None}

