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
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format

from checkpoint.server.runs import Refused
from checkpoint.server.single_use import SingleUseStore
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.codes import APPROVAL_EXPIRED, APPROVAL_INVALID
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


def asked_rules(asked: Mapping[str, Any]) -> list[str]:
    """Every approve-if rule a REQUIRE_APPROVAL record asks a person for ("rule:NAME")."""
    listed = asked.get("approval_rules")
    return listed.split(",") if listed else [asked.get("rule") or ""]


class Approvals:
    def __init__(self, keys: KeySet, digest_key: bytes, single_use: SingleUseStore,
                 ttl_seconds: float = APPROVAL_TOKEN_TTL_SECONDS, clock: Callable[[], float] = time.time):
        self._signer = Signer(keys, APPROVAL_LABEL, ttl_seconds, clock)
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

    def issue(self, asked: Mapping[str, Any], approver: str, principal: str, approval_id: str) -> str:
        return self._signer.sign({
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
            )
        except TokenExpired as exc:
            raise Refused(APPROVAL_EXPIRED, f"the approval token is not valid: {exc} (ask the approver again)",
                          "approval") from None
        except (TokenInvalid, KeyError, TypeError) as exc:
            reason = str(exc) if isinstance(exc, TokenInvalid) else "claims are not well formed"
            raise Refused(APPROVAL_INVALID, f"the approval token is not valid: {reason}", "approval") from None
        if verified.decision_id != approval.decision_id or verified.run_id != request.run.run_id:
            raise Refused(
                APPROVAL_INVALID,
                f"the approval token approves decision {verified.decision_id[:64]!r} of run "
                f"{verified.run_id[:64]!r}, not this one",
                "approval",
            )
        return verified

    def spend(self, approval: VerifiedApproval, request: pb.CheckRequest, digest: str) -> str | None:
        """Use the approval for this call, once. Why not, or None when it is now spent on this call."""
        if digest != approval.call_digest:
            return f"decision {approval.decision_id[:64]!r} approved a different call"
        first = self._single_use.claim(approval.decision_id, f"used by run {request.run.run_id}")
        if first is not None:
            return f"decision {approval.decision_id[:64]!r} was already approved and used ({first[:100]})"
        return None
