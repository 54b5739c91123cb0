"""Policy change impact: replay recorded decisions (and the policy tests) against a candidate
policy folder and list every decision whose verdict or code would change (`warden policy diff`).

What a replay assumes (docs/policies.md, "Policy diff"):
- The request is rebuilt from the record: the actor chain, tenant, run ids, the action and its
  inputs as logged; the run's mode and inputs from the `start_run` record of its root run.
- Counters are not recorded: a replay decides as at the start of a fresh run (every counter
  zero), so breakers do not trip. A decision a breaker made is reported as not replayable.
- Arguments the log masked (the tool's `audit` section) or kept only as a hash cannot be
  rebuilt: such a decision is not replayable, never guessed.
- Agents: by default each agent of the chain at the version the candidate defines for it now
  (`versions="current"`: what the edit means for the next run). With `versions="pinned"` the
  version the record pinned, resolved in the candidate and its catalog (`--data`); a version the
  candidate cannot resolve is reported as not replayable.
- An ALLOW that a person's approval made is replayed with the approve-if rules that approval
  answered (from the REQUIRE_APPROVAL record of the same call digest); without that record it
  is not replayable.
- Refusals made outside the decision function (credentials, run tokens, malformed requests,
  the log, grants, roles) are not replayable: a policy folder does not decide them.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from google.protobuf import json_format

from checkpoint.engine import InvalidRequest, decide
from checkpoint.policy import PolicySet
from checkpoint.policy.pinned import load as load_pinned
from warden.checkpoint.v1 import checkpoint_pb2 as pb

Versions = Literal["current", "pinned"]
REPLAYED_ACTIONS = frozenset({"tool_call", "model_call", "delegation"})
# rules of refusals the decision function does not make (the service, the log, the grant)
# (the decision function's own start `request.`, `roles`: those are replayed)
_OUTSIDE = frozenset({"principal", "run_token", "request", "audit", "engine", "grant", "skill", "act"})
_OUTSIDE_PREFIXES = ("role:", "catalog", "start_run")
_STEP_INDEX = re.compile(r"\[\d+\]")
_APPROVED_BY = re.compile(r"^approved by (.{1,100}?) \(decision")
_VERDICT_NAMES = {v: pb.Verdict.Name(v).removeprefix("VERDICT_") for v in pb.Verdict.values()}
_KINDS = {"person": pb.ACTOR_KIND_PERSON, "agent": pb.ACTOR_KIND_AGENT}
_MODES = {"interactive": pb.RUN_MODE_INTERACTIVE, "background": pb.RUN_MODE_BACKGROUND}
ASSUMPTIONS = (
    "counters are not recorded: each decision is replayed as at the start of a fresh run (counters zero), "
    "so breakers do not trip",
    "rules that read `now` see the time of the record",
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ReplaySourceError(Exception):
    """The recorded decisions cannot be read (no log, another schema, not JSON lines)."""


@dataclass(frozen=True)
class Answer:
    verdict: str
    code: str
    rule: str

    def __str__(self) -> str:
        return f"{self.verdict} {self.code}"


@dataclass(frozen=True)
class Flip:
    source: str  # "decision ID" or "test SUITE / NAME"
    agent: str
    action: str
    tool: str
    before: Answer
    after: Answer

    @property
    def rule(self) -> str:
        """The rule the change is filed under: the one that decides now, or decided before (a plan's
        `plan.step[N]` as `plan.step`, so one edit's plan refusals form one group)."""
        rule = self.after.rule if self.after.verdict != "ALLOW" else self.before.rule
        return _STEP_INDEX.sub("", rule)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "agent": self.agent, "action": self.action, "tool": self.tool,
                "rule": self.rule, "before": vars(self.before), "after": vars(self.after)}


@dataclass
class DiffReport:
    records: int = 0  # records read
    replayed: int = 0  # decisions decided again
    acts: Counter[str] = field(default_factory=Counter)  # records that are no decision to replay, by action
    not_replayable: Counter[str] = field(default_factory=Counter)  # by reason
    tests: int = 0
    flips: list[Flip] = field(default_factory=list)
    baseline: str = "recorded"  # or "current": the answers compared against
    versions: Versions = "current"

    def groups(self) -> dict[tuple[str, str], list[Flip]]:
        """Flips grouped by (rule, agent), in a stable order."""
        out: dict[tuple[str, str], list[Flip]] = defaultdict(list)
        for flip in self.flips:
            out[(flip.rule, flip.agent)].append(flip)
        return dict(sorted(out.items()))

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records, "replayed": self.replayed, "tests": self.tests, "baseline": self.baseline,
            "versions": self.versions, "assumptions": list(ASSUMPTIONS),
            "not_replayable": dict(self.not_replayable.most_common()), "acts": dict(sorted(self.acts.items())),
            "changed": len(self.flips),
            "groups": [{"rule": rule, "agent": agent, "count": len(flips), "decisions": [f.as_dict() for f in flips]}
                       for (rule, agent), flips in self.groups().items()],
        }


# -- reading records -------------------------------------------------------------------------


def read_records(source: Path) -> Iterator[dict[str, Any]]:
    """Records from a data folder (its decisions.db), a decision log file, or a JSONL export."""
    path = source / "decisions.db" if source.is_dir() else source
    if not path.is_file():
        raise ReplaySourceError(f"no decision log or export at {path}")
    with path.open("rb") as f:
        magic = f.read(16)
    if magic == b"SQLite format 3\x00":
        yield from _read_log(path)
    else:
        yield from _read_jsonl(path)


def read_facts(source: Path) -> Iterator[dict[str, Any]]:
    """The records a replay learns runs' modes and approvals from (start_run, REQUIRE_APPROVAL):
    from a log, only those are read; from an export, every line."""
    path = source / "decisions.db" if source.is_dir() else source
    if not path.is_file():
        raise ReplaySourceError(f"no decision log or export at {path}")
    with path.open("rb") as f:
        magic = f.read(16)
    if magic == b"SQLite format 3\x00":
        yield from _read_log(path, action="start_run")
        yield from _read_log(path, verdict="REQUIRE_APPROVAL")
    else:
        yield from _read_jsonl(path)


def _read_log(path: Path, **filters: Any) -> Iterator[dict[str, Any]]:
    from checkpoint.audit.errors import AuditUnavailable
    from checkpoint.audit.reader import DecisionReader

    try:  # across the log's sealed segments too
        yield from DecisionReader(path).read(**filters)
    except AuditUnavailable as exc:
        raise ReplaySourceError(f"{path}: {exc}") from None


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ReplaySourceError(f"{path}:{number}: not a JSON line: {exc}") from None
            if not isinstance(record, dict) or "action" not in record or "verdict" not in record:
                raise ReplaySourceError(f"{path}:{number}: not a decision record (`warden audit export` writes them)")
            for name in ("actor_chain", "arguments"):
                if isinstance(record.get(name), str):
                    record[name] = json.loads(record[name])
            yield record


# -- rebuilding requests ---------------------------------------------------------------------


@dataclass
class _RunFacts:
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


def rebuild(record: dict[str, Any], policies: PolicySet, facts: _RunFacts, versions: Versions) -> pb.CheckRequest:
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


def _run_context(record: dict[str, Any], policies: PolicySet, facts: _RunFacts, versions: Versions) -> pb.RunContext:
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


def _build_run_context(record: dict[str, Any], chain: list[dict[str, Any]], policies: PolicySet, facts: _RunFacts,
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


def _approval(record: dict[str, Any], facts: _RunFacts) -> tuple[str, frozenset[str]]:
    """The approver and the approve-if rules an approved call's approval answered."""
    if record.get("rule") != "approval" or record.get("verdict") != "ALLOW":
        return "", frozenset()
    asked = facts.asked.get(record.get("call_digest") or "")
    if asked is None:
        raise NotReplayable("approved: the REQUIRE_APPROVAL record its approval answered is not in the input")
    match = _APPROVED_BY.match(record.get("reason") or "")
    return (match.group(1) if match else "approver"), frozenset(r.removeprefix("rule:") for r in asked)


class _Answers:
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
    return Answer(_VERDICT_NAMES[response.verdict], response.code, response.rule)


def _time(record: dict[str, Any]) -> datetime | None:
    try:
        return datetime.fromisoformat(record["time"])
    except (KeyError, TypeError, ValueError):
        return None


# -- the diff --------------------------------------------------------------------------------


def diff(records: Iterable[dict[str, Any]] | None, candidate: PolicySet, *, current: PolicySet | None = None,
         tests: Iterable[tuple[str, Any]] = (), versions: Versions = "current",
         facts_from: Iterable[dict[str, Any]] | None = None) -> DiffReport:
    """Replay `records` (and the policy test cases `tests`, as (shown name, Case)) against
    `candidate`. The answers compared against: `current`'s replay when given (the same
    assumptions on both sides), else what was recorded (for a test, what it expects).

    `facts_from`: the records to learn runs' modes and approvals from (a second pass over the
    same source); when None, `records` must be a list (it is read twice)."""
    report = DiffReport(baseline="current" if current is not None else "recorded", versions=versions)
    facts = _RunFacts()
    if records is not None:
        if facts_from is None:
            records = list(records)
            facts_from = records
        for record in facts_from:
            facts.learn(record)
        answers = (_Answers(candidate), _Answers(current) if current is not None else None)
        for record in records:
            report.records += 1
            _replay_one(record, answers, facts, versions, report)
    for shown, case in tests:
        _replay_case(shown, case, candidate, current, report)
    return report


def _replay_one(record: dict[str, Any], answers: tuple[_Answers, _Answers | None], facts: _RunFacts,
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
        approver, approved = _approval(record, facts)
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
        return Answer(_VERDICT_NAMES[response.verdict], response.code, response.rule)

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


def render(report: DiffReport, *, limit: int = 20) -> str:
    """The text report: totals, assumptions, then the changes by rule and agent."""
    lines = [
        f"policy diff: {report.records} records read, {report.replayed} decisions replayed, "
        f"{sum(report.not_replayable.values())} not replayable, {sum(report.acts.values())} other acts skipped; "
        f"{report.tests} policy tests replayed",
        f"compared against: {'the current folder, replayed alike' if report.baseline == 'current' else 'the recorded answers'}"
        f"; agents at {'the candidate' + chr(39) + 's current versions' if report.versions == 'current' else 'their pinned versions'}",
    ]
    lines += [f"assumed: {a}" for a in ASSUMPTIONS]
    for reason, count in report.not_replayable.most_common():
        lines.append(f"not replayable: {count:>6}  {reason}")
    if not report.flips:
        lines.append("no decision would change")
        return "\n".join(lines)
    lines.append(f"{len(report.flips)} decision(s) would change:")
    for (rule, agent), flips in report.groups().items():
        lines.append(f"  rule {rule or '-'}  agent {agent}: {len(flips)}")
        for flip in flips[:limit]:
            what = f"{flip.action} {flip.tool}".strip()
            lines.append(f"    {flip.before} -> {flip.after}  {what}  ({flip.source})")
        if len(flips) > limit:
            lines.append(f"    ... and {len(flips) - limit} more")
    return "\n".join(lines)
