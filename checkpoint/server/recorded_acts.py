"""One way to do a person's or an agent's act on the catalog, the skills and templates, or the
learnings: check it, record it (ALLOW) before it is written, or record its refusal.

The stores call `record(change)` after their checks and before their write; when the decision
log cannot take the record, the act is not done (`audit_unavailable`). A store's own refusal
(an exception with `code` and `message`), a Refused, a definition that does not load, and a bug
are each a DENY on the record. catalog_acts, entry_acts and learning_acts give only what differs:
the answer's words and the record's fields.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoint.policy import PolicyLoadError, PolicySet
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.server.runs import Refused
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.store.errors import StoreError

if TYPE_CHECKING:
    from checkpoint.server.collaborators import PoliciesInForce, Recorder

log = logging.getLogger("warden.checkpoint.acts")
ALLOW, DENY = pb.VERDICT_ALLOW, pb.VERDICT_DENY

# (policies, principal, record, fields) -> what the act returns (None when it changed nothing)
Act = Callable[[PolicySet, Principal, Callable[[Any], None], dict[str, Any]], Any]
# the words of an ALLOW: (response, change) -> None, setting code and reason
Answer = Callable[[pb.CheckResponse, Any], None]
# the record: (response, policies, principal, fields, change or None for a refusal) -> record dict
RecordOf = Callable[[pb.CheckResponse, PolicySet, "Principal | None", dict[str, Any], Any], dict[str, Any]]


class _NotRecorded(Exception):
    """The decision log refused an act's record: the act is not done."""


@dataclass
class Done:
    response: pb.CheckResponse
    result: Any  # what the act returned; None when it was refused
    policies: PolicySet


def perform(in_force: PoliciesInForce, recorder: Recorder, caller: str, name: str, rule: str, act: Act, *, answer: Answer,
            record_of: RecordOf, store_errors: tuple[type[Exception], ...]) -> Done:
    """Check and do one act named `name`; its record says `rule`. `store_errors` are the store's own
    refusals (each with `code` and `message`)."""
    policies = in_force.current()
    principal = policies.principals.of(caller)
    response = pb.CheckResponse(verdict=DENY, rule=rule, policy_revision=policies.revision)
    fields: dict[str, Any] = {}
    recorded: list[bool] = []  # [True] once the act's record is in; [False]: nothing can be recorded

    def record(change: Any) -> None:
        response.verdict = ALLOW
        answer(response, change)
        entry = record_of(response, policies, principal, fields, change)
        try:
            recorder.append(entry)
        except Exception as exc:  # the log cannot take it: the act does not happen
            raise _NotRecorded(type(exc).__name__) from exc
        recorded.append(True)

    result = None
    try:
        if principal is None:
            raise Refused(codes.CALLER_NOT_PERMITTED, f"the credential {caller_name(caller)[:100]!r} names no "
                          "principal in the policy files", "principal")
        result = act(policies, principal, record, fields)
    except Refused as refused:
        response.verdict, response.code, response.rule, response.reason = DENY, refused.code, refused.rule, refused.reason
    except store_errors as exc:
        response.verdict, response.code, response.reason = DENY, exc.code, exc.message  # type: ignore[attr-defined]
    except StoreError as exc:  # a shared store down or slow: refused with its code, nothing changed
        log.error("%s %s: %s", rule, name, exc)
        response.verdict, response.code, response.rule = DENY, exc.code, rule
        response.reason = f"the {name} cannot be done now: {str(exc)[:300]}"
        recorded.clear()  # recorded, then not written: the refusal that follows says so
    except PolicyLoadError as exc:
        response.verdict, response.code, response.reason = DENY, codes.INVALID_REQUEST, str(exc)[:2000]
    except _NotRecorded as exc:
        recorder.metrics.audit_failures.inc()
        response.verdict, response.code, response.reason = DENY, codes.AUDIT_UNAVAILABLE, (
            f"the {name} could not be recorded, so it was not done: {exc}")
        recorded.append(False)  # the log cannot take the refusal either
    except Exception:  # a bug must not become a change, nor an unrecorded error
        log.exception("%s %s failed", rule, name)
        response.verdict, response.code, response.rule = DENY, codes.POLICY_ERROR, rule
        response.reason = f"the {name} failed inside the checkpoint; nothing was changed"
        recorded.clear()
    if response.verdict != ALLOW:
        result = None
    if not recorded:  # a refusal: on the record too
        recorder.append_or_deny(record_of(response, policies, principal, fields, None), response)
    recorder.count(response.verdict, response.code)
    return Done(response, result, policies)
