"""Requests refused before any decision (bytes that did not parse, a caller with no valid
credentials, a request the decision function found invalid): recorded all the same, with whatever
run context they carried, capped, and filed under no run nobody vouched for. Best effort: the
caller is refused either way, so a log failure here changes no answer."""

from __future__ import annotations

import logging
import time
from typing import Any

from checkpoint.audit import AuditUnavailable
from checkpoint.audit.bounded import bound_refusal
from checkpoint.policy.principals import Principal, caller_name
from checkpoint.server.act_records import forget_claimed_run
from checkpoint.server.check_records import check_record, refused_request, tool_arguments
from checkpoint.server.collaborators import Recorder
from checkpoint.server.ids import new_decision_id
from checkpoint.server.reload import PolicyStore
from warden.checkpoint.v1 import checkpoint_pb2 as pb

log = logging.getLogger("warden.checkpoint.service")


class RefusedRequests:
    def __init__(self, store: PolicyStore, recorder: Recorder, mask_key: bytes):
        self.store = store
        self.recorder = recorder
        self.mask_key = mask_key

    def record(self, request: Any, code: str, reason: str, revision: str | None,
               caller: str | None = None, principal: Principal | None = None) -> None:
        """A request that names no action (or is not a CheckRequest at all) is recorded with
        action "none" and whatever run context it carried."""
        request = refused_request(request)
        action = request.WhichOneof("action") or "none"
        response = pb.CheckResponse(
            decision_id=new_decision_id(), verdict=pb.VERDICT_DENY, code=code, rule="request", reason=reason,
            policy_revision=revision or "",
        )  # fmt: skip
        arguments = tool_arguments(request, action)
        record = check_record(request, response, action, arguments, self.store.current, time.time_ns(), self.mask_key)
        record.caller = caller_name(caller) if caller else None
        record.principal = principal.name if principal is not None else None
        try:
            self.recorder.append(bound_refusal(record))  # capped: a refused caller chose these values
        except AuditUnavailable as exc:
            self.recorder.metrics.audit_failures.inc()
            log.error("refusal (%s) not recorded: %s", code, exc)

    def malformed(self, reason: str) -> None:
        """Bytes that did not parse: refused, and recorded with action "none"."""
        self.recorder.metrics.refusals.labels("invalid_request").inc()
        self.record(None, "invalid_request", reason, self.store.status.revision or None)

    def unauthenticated(self, method: str, request: Any) -> None:
        self.recorder.metrics.refusals.labels("unauthenticated").inc()
        requests = (
            [i.request for i in request.items] if isinstance(request, pb.CheckBatchRequest) else [request]
        )
        revision = self.store.status.revision or None
        for item in requests:
            claimed = forget_claimed_run(item)
            self.record(item, "unauthenticated", f"{method}: no valid credentials{claimed}", revision)
