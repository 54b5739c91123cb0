"""How a decision step reports: `Stop` ends the decision; `Trace` remembers every step for explain."""

from __future__ import annotations

from dataclasses import dataclass

from warden.checkpoint.v1 import checkpoint_pb2 as pb

ALLOW, DENY, APPROVE, HALT = (
    pb.VERDICT_ALLOW,
    pb.VERDICT_DENY,
    pb.VERDICT_REQUIRE_APPROVAL,
    pb.VERDICT_HALT,
)


class InvalidRequest(Exception):
    """The request is not well formed enough to decide; the server answers INVALID_ARGUMENT."""

    def __init__(self, code: str, message: str, field: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field


class Stop(Exception):
    """A step decided: first failure wins, so the decision ends here."""

    def __init__(self, verdict: pb.Verdict, code: str, rule: str, reason: str):
        super().__init__(reason)
        self.verdict = verdict
        self.code = code
        self.rule = rule
        self.reason = reason


@dataclass(slots=True)
class Trace:
    """Every rule evaluated and its outcome; collects nothing unless explain was asked."""

    enabled: bool
    outcomes: list[pb.RuleOutcome]

    def add(self, rule: str, outcome: str, code: str = "", detail: str = "") -> None:
        if self.enabled:
            self.outcomes.append(pb.RuleOutcome(rule=rule, outcome=outcome, code=code, detail=detail))

    def stop(self, verdict: pb.Verdict, code: str, rule: str, reason: str) -> Stop:
        self.add(rule, "fail", code, reason)
        return Stop(verdict, code, rule, reason)
