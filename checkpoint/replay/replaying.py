"""Replaying records and policy tests against a candidate policy set, and comparing the answers with
the recorded ones or the current set's."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from checkpoint.engine import InvalidRequest, decide
from checkpoint.policy import PolicySet
from checkpoint.policy.pinned import load as load_pinned
from checkpoint.replay.report import Answer, DiffReport, Flip, Versions
from checkpoint.replay.requests import NotReplayable, RunFacts, approval, rebuild
from warden.checkpoint.v1 import checkpoint_pb2 as pb

REPLAYED_ACTIONS = frozenset({"tool_call", "model_call", "delegation"})
VERDICT_NAMES = {v: pb.Verdict.Name(v).removeprefix("VERDICT_") for v in pb.Verdict.values()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Answers:
    """decide() for one policy set, memoised: the decision function is pure, and a log repeats
    the same call often (a run polling a task). The key is the whole request as bytes (run ids
    included), the approval, and the time only when some rule reads `now`."""

    MAX = 100_000

    def __init__(self, policies: PolicySet):
        self.policies = policies
        self.reads_now = any("now" in rule.reads for rule in policies.rules)
        self.memo: dict[tuple[Any, ...], Answer] = {}

    def __call__(self, request: pb.CheckRequest, approver: str, approved: frozenset[str],
                 now: datetime | None) -> Answer:
        key = (request.SerializeToString(deterministic=True), approver, approved, now if self.reads_now else None)
        found = self.memo.get(key)
        if found is None:
            found = _answer(self.policies, request, approver, approved, now)
            if len(self.memo) >= self.MAX:
                self.memo.clear()
            self.memo[key] = found
        return found


def _answer(policies: PolicySet, request: pb.CheckRequest, approver: str, approved: frozenset[str],
            now: datetime | None) -> Answer:
    try:
        response = decide(policies, request, approver=approver, approved_rules=approved, now=now or _EPOCH,
                          pinned=load_pinned(policies, request))
    except InvalidRequest as exc:
        return Answer("DENY", exc.code, "request")
    return Answer(VERDICT_NAMES[response.verdict], response.code, response.rule)


def _time(record: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(record["time"])
    except (KeyError, TypeError, ValueError):
        return None


def diff(records: Iterable[dict[str, Any]] | None, candidate: PolicySet, *, current: PolicySet | None = None,
         tests: Iterable[tuple[str, Any]] = (), versions: Versions = "current",
         facts_from: Iterable[dict[str, Any]] | None = None) -> DiffReport:
    """Replay `records` (and the policy test cases `tests`, as (shown name, Case)) against
    `candidate`. The answers compared against: `current`'s replay when given (the same
    assumptions on both sides), else what was recorded (for a test, what it expects).

    `facts_from`: the records to learn runs' modes and approvals from (a second pass over the
    same source); when None, `records` must be a list (it is read twice)."""
    report = DiffReport(baseline="current" if current is not None else "recorded", versions=versions)
    facts = RunFacts()
    if records is not None:
        if facts_from is None:
            records = list(records)
            facts_from = records
        for record in facts_from:
            facts.learn(record)
        answers = (Answers(candidate), Answers(current) if current is not None else None)
        for record in records:
            report.records += 1
            _replay_one(record, answers, facts, versions, report)
    for shown, case in tests:
        _replay_case(shown, case, candidate, current, report)
    return report


def _replay_one(record: dict[str, Any], answers: tuple[Answers, Answers | None], facts: RunFacts,
                versions: Versions, report: DiffReport) -> None:
    candidate, current = answers
    action = record.get("action") or "none"
    if action not in REPLAYED_ACTIONS:
        if action == "plan":
            report.not_replayable["a plan's steps are recorded without their arguments"] += 1
        else:
            report.acts[action] += 1
        return
    try:
        approver, approved = approval(record, facts)
        after_request = rebuild(record, candidate.policies, facts, versions)
        if current is not None:
            before_request = rebuild(record, current.policies, facts, versions)
    except NotReplayable as reason:
        report.not_replayable[str(reason)] += 1
        return
    now = _time(record)
    after = candidate(after_request, approver, approved, now)
    if current is not None:
        before = current(before_request, approver, approved, now)
    else:
        before = Answer(record.get("verdict") or "", record.get("code") or "", record.get("rule") or "")
    report.replayed += 1
    if (after.verdict, after.code) != (before.verdict, before.code):
        report.flips.append(Flip(f"decision {record.get('decision_id')}", record.get("agent") or "-", action,
                                 record.get("tool") or "", before, after))


def _replay_case(shown: str, case: Any, candidate: PolicySet, current: PolicySet | None, report: DiffReport) -> None:
    from checkpoint.policytest import build_request

    def answer(policies: PolicySet) -> Answer:
        request = build_request(policies, case)
        approved = frozenset(r.name for r in policies.rules) if case.approved_by else frozenset()
        try:
            response = decide(policies, request, approver=case.approved_by or "", approved_rules=approved,
                              now=case.now, pinned=load_pinned(policies, request))
        except InvalidRequest as exc:
            return Answer("INVALID", exc.code, "request")
        return Answer(VERDICT_NAMES[response.verdict], response.code, response.rule)

    report.tests += 1
    after = answer(candidate)
    before = answer(current) if current is not None else Answer(case.expect.verdict, case.expect.code,
                                                                 case.expect.rule or "")
    if (after.verdict, after.code) != (before.verdict, before.code):
        agent = (case.chain or [case.agent or "-"])[-1]
        report.flips.append(Flip(f"test {shown}", agent, _case_action(case), case.tool or "", before, after))


def _case_action(case: Any) -> str:
    for name, action in (("tool", "tool_call"), ("model_call", "model_call"), ("delegation", "delegation")):
        if getattr(case, name) is not None:
            return action
    return "plan"
