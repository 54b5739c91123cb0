"""What a replay found: the answers before and after, the decisions that would change, grouped by
rule and agent, and the text `warden policy diff` prints."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Literal

Versions = Literal["current", "pinned"]
_STEP_INDEX = re.compile(r"\[\d+\]")
ASSUMPTIONS = (
    "counters are not recorded: each decision is replayed as at the start of a fresh run (counters zero), "
    "so breakers do not trip",
    "rules that read `now` see the time of the record",
)


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
