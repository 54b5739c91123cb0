"""Approvals: a person's act, authenticated by their own credential, bound to one whole call, once.

1. A call answered REQUIRE_APPROVAL is recorded with `call_digest`: a keyed digest of the whole
   call (run, agent version, action, every argument masked or not, and for a delegation the child
   version it would run).
2. A person calls Approve with their own credential. The service finds that record, checks the
   person's principal may approve it (tenant, agent, rule, and their own runs only if allowed),
   records the approval, and returns an approval token binding the run, the decision, the digest
   and the approver's identity. The driver relays the token; it cannot make one.
3. The call is sent again with `approval {decision_id, token}`. The token is verified, the call's
   digest must equal the approved one, and the approval is spent by a unique key (`SingleUse`)
   before the ALLOW is recorded: the same approval never passes twice, however many copies race.
Anything else is denied `approval_invalid` and recorded like every decision.
4. Every REQUIRE_APPROVAL has a deadline: its time plus the approve-if rules' timeout under the
   revision it was decided with (the shortest of them; the Instance's default for a rule that sets
   none). Approve after it, or the approved call sent after it, is refused `approval_timed_out`;
   the run's driver records the expiry (RecordAct `expire`), which takes the single-use key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from checkpoint.audit.record import format_time_ns
from checkpoint.policy import PolicySet
from checkpoint.server.runs import Refused
from checkpoint.server.single_use import SingleUseStore
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.codes import APPROVAL_EXPIRED, APPROVAL_INVALID, APPROVAL_TIMED_OUT
from warden.token_keys import KeySet
from warden.tokens import (
    APPROVAL_LABEL,
    APPROVAL_TOKEN_TTL_SECONDS,
    Signer,
    TokenExpired,
    TokenInvalid,
    call_digest,
)


@dataclass(frozen=True, slots=True)
class VerifiedApproval:
    decision_id: str
    run_id: str
    call_digest: str
    approver: str
    rules: frozenset[str]  # the approve-if rules (names) the approver was allowed to answer
    approval_id: str = ""  # the decision id of the approval record that issued the token
    deadline_us: int = 0  # the REQUIRE_APPROVAL's deadline (Unix microseconds); 0 in tokens made before it


# The single-use key's text for an approval whose deadline passed: no approval of it is spent after.
EXPIRED_PREFIX = "expired"


def asked_rules(asked: Mapping[str, Any]) -> list[str]:
    """Every approve-if rule a REQUIRE_APPROVAL record asks a person for ("rule:NAME")."""
    listed = asked.get("approval_rules")
    return listed.split(",") if listed else [asked.get("rule") or ""]


def approval_timeout(policies: PolicySet, rules: Iterable[str]) -> float:
    """Seconds a REQUIRE_APPROVAL of `rules` ("rule:NAME") waits: the shortest of the rules' own
    timeouts, the Instance's default standing in for a rule that sets none (or is not found)."""
    default = policies.instance.approval_timeout_seconds
    specs = {r.spec.name: r.spec for r in policies.rules}
    timeouts = []
    for rule in rules:
        spec = specs.get(rule.removeprefix("rule:"))
        own = spec.approval_timeout_seconds if spec is not None else None
        timeouts.append(own if own is not None else default)
    return min(timeouts, default=default)


def deadline_us(decided_us: int, policies: PolicySet, rules: Iterable[str]) -> int:
    return decided_us + round(approval_timeout(policies, rules) * 1_000_000)


def stamp_deadline(response: pb.CheckResponse, policies: PolicySet, decided_ns: int) -> None:
    """Give a REQUIRE_APPROVAL answer its deadline: decided at `decided_ns`, under `policies` (the
    revision it was decided with), as Approve computes it again from the record."""
    deadline = deadline_us(decided_ns // 1000, policies, list(response.approval_rules) or [response.rule])
    response.approval_deadline.FromMicroseconds(deadline)
    response.reason += f" (a person answers by {format_time_ns(deadline * 1000)})"


def record_time_us(text: str) -> int:
    """A record's `time` ("2026-01-02T03:04:05.123456Z") in Unix microseconds."""
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return int(moment.timestamp()) * 1_000_000 + moment.microsecond


def timed_out(deadline: int) -> Refused:
    return Refused(APPROVAL_TIMED_OUT,
                   f"the approval's deadline {format_time_ns(deadline * 1000)} passed: the call is refused "
                   "(it may be proposed again, and a person asked again)", "approval")


class Approvals:
    def __init__(self, keys: KeySet, digest_key: bytes, single_use: SingleUseStore,
                 ttl_seconds: float = APPROVAL_TOKEN_TTL_SECONDS, clock: Callable[[], float] = time.time):
        self._signer = Signer(keys, APPROVAL_LABEL, ttl_seconds, clock)
        # Deadlines are measured by the clock that stamps the records they are computed from (the
        # wall clock, not the rules' `now`, which tests and replays may set): tests shift it.
        self.wall: Callable[[], float] = time.time
        self._digest_key = digest_key
        self._single_use = single_use

    def digest(self, request: pb.CheckRequest, response: pb.CheckResponse, action: str | None) -> str:
        """The whole call, as the approver saw it asked: equal calls, equal digests."""
        run = request.run
        body = getattr(request, action) if action else None
        return call_digest(self._digest_key, {
            "run_id": run.run_id,
            "agent": response.agent,
            "agent_version": response.agent_version,
            "action": action,
            "call": json_format.MessageToDict(body, preserving_proto_field_name=True) if body is not None else None,
            "child_agent_version": response.child_agent_version,
        })

    def asked(self, records: Callable[..., Iterable[Mapping[str, Any]]], run_id: str, decision_id: str) -> dict[str, Any]:
        """The REQUIRE_APPROVAL record a person answers; Refused when there is none."""
        for record in records(run_id=run_id, verdict="REQUIRE_APPROVAL"):
            if record.get("decision_id") == decision_id:
                if not record.get("call_digest"):
                    break
                return dict(record)
        raise Refused(
            APPROVAL_INVALID,
            f"decision {decision_id[:64]!r} is not a REQUIRE_APPROVAL answer of run {run_id[:64]!r}",
            "approval",
        )

    def deadline_of(self, asked: Mapping[str, Any], policies_of: Callable[[str], PolicySet]) -> int:
        """The deadline (Unix microseconds) of a REQUIRE_APPROVAL record, under the revision it was
        decided with (`policies_of` gives its policy set)."""
        policies = policies_of(str(asked.get("policy_revision") or ""))
        return deadline_us(record_time_us(str(asked["time"])), policies, asked_rules(asked))

    def refuse_late(self, deadline: int) -> None:
        """Refused `approval_timed_out` from the deadline on."""
        if self.wall() * 1_000_000 >= deadline:
            raise timed_out(deadline)

    def expire(self, decision_id: str, deadline: int) -> None:
        """The expiry of a REQUIRE_APPROVAL whose deadline passed, made final: it takes the
        decision's single-use key, so no approval of it is spent after. Refused when the deadline
        has not passed or the decision was settled otherwise (rejected, or its approval spent); an
        expiry made already stands (the act is safe to send again)."""
        if self.wall() * 1_000_000 < deadline:
            raise Refused(APPROVAL_INVALID, f"decision {decision_id[:64]!r} waits until "
                          f"{format_time_ns(deadline * 1000)}: its deadline has not passed", "approval")
        try:
            first = self._single_use.claim(decision_id, f"{EXPIRED_PREFIX} at {format_time_ns(deadline * 1000)}")
        except Exception as exc:  # noqa: BLE001 - the store failed: the expiry is not made, and says so
            raise Refused(APPROVAL_INVALID, f"the expiry could not be made final (its single-use store "
                          f"failed: {str(exc)[:200]})", "approval") from None
        if first is not None and not first.startswith(EXPIRED_PREFIX):
            raise Refused(APPROVAL_INVALID, f"decision {decision_id[:64]!r} is settled ({first[:100]})", "approval")

    def issue(self, asked: Mapping[str, Any], approver: str, principal: str, approval_id: str,
              deadline: int = 0) -> str:
        return self._signer.sign({
            "deadline_us": deadline,
            "decision_id": asked["decision_id"],
            "run_id": asked["run_id"],
            "call_digest": asked["call_digest"],
            "rules": [r.removeprefix("rule:") for r in asked_rules(asked)],
            "approver": approver,
            "principal": principal,
            "approval_id": approval_id,
        })

    def reject(self, decision_id: str, person: str) -> None:
        """A rejection takes the decision's single-use key: no approval of it can be spent after.
        The claim is the check (a look first, then a claim, would let an approved call be spent in
        between and still be answered "rejected"): Refused when the key is taken already, by a
        rejection or by the call its approval let through, or cannot be taken."""
        try:
            first = self._single_use.claim(decision_id, f"rejected by {person}")
        except Exception as exc:  # noqa: BLE001 - the store failed: the rejection is not made, and says so
            raise Refused(APPROVAL_INVALID, f"the rejection could not be made final (its single-use store "
                          f"failed: {str(exc)[:200]})", "approval") from None
        if first is not None:
            raise Refused(APPROVAL_INVALID, f"decision {decision_id[:64]!r} is settled ({first[:100]})", "approval")

    def not_rejected(self, decision_id: str) -> None:
        """Refused when the decision was already rejected (or its approval used), or when the
        single-use store cannot say."""
        try:
            used = self._single_use.used_by(decision_id)
        except Exception as exc:  # noqa: BLE001 - an approval nobody can vouch is unsettled is not given
            raise Refused(APPROVAL_INVALID, f"the approval's single-use store failed: {str(exc)[:200]}",
                          "approval") from None
        if used is not None:
            raise Refused(APPROVAL_INVALID, f"decision {decision_id[:64]!r} is settled ({used[:100]})", "approval")

    def verify(self, request: pb.CheckRequest, at: float | None = None) -> VerifiedApproval:
        """The approval the request presents, if its token is one this checkpoint signed for this
        run and decision; Refused otherwise. The call itself is compared in `spend`."""
        approval = request.approval
        try:
            claims = self._signer.verify(approval.token, at)
            verified = VerifiedApproval(
                decision_id=str(claims["decision_id"]),
                run_id=str(claims["run_id"]),
                call_digest=str(claims["call_digest"]),
                approver=str(claims["approver"]),
                rules=frozenset(str(r) for r in claims["rules"]),
                approval_id=str(claims.get("approval_id") or ""),
                deadline_us=int(claims.get("deadline_us") or 0),
            )
        except TokenExpired as exc:
            raise Refused(APPROVAL_EXPIRED, f"the approval token is not valid: {exc} (ask the approver again)",
                          "approval") from None
        except (TokenInvalid, KeyError, TypeError, ValueError) as exc:
            reason = str(exc) if isinstance(exc, TokenInvalid) else "claims are not well formed"
            raise Refused(APPROVAL_INVALID, f"the approval token is not valid: {reason}", "approval") from None
        if verified.decision_id != approval.decision_id or verified.run_id != request.run.run_id:
            raise Refused(
                APPROVAL_INVALID,
                f"the approval token approves decision {verified.decision_id[:64]!r} of run "
                f"{verified.run_id[:64]!r}, not this one",
                "approval",
            )
        if verified.deadline_us:  # the approved call comes before the deadline too
            self.refuse_late(verified.deadline_us)
        return verified

    def spend(self, approval: VerifiedApproval, request: pb.CheckRequest, digest: str) -> str | None:
        """Use the approval for this call, once. Why not, or None when it is now spent on this call."""
        if digest != approval.call_digest:
            return f"decision {approval.decision_id[:64]!r} approved a different call"
        first = self._single_use.claim(approval.decision_id, f"used by run {request.run.run_id}")
        if first is not None:
            return f"decision {approval.decision_id[:64]!r} was already approved and used ({first[:100]})"
        return None
