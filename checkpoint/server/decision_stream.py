"""WatchDecisions: the decision log read and followed, narrowed to what the caller may audit and
asked again whenever the policy set in force changes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from checkpoint.audit.store import Filters
from checkpoint.policy.audit_scope import AuditRefused, readable_tenants
from checkpoint.server import convert
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied

if TYPE_CHECKING:
    from checkpoint.audit.port import DecisionLogStore
    from checkpoint.server.collaborators import PoliciesInForce




class DecisionStream:
    def __init__(self, in_force: PoliciesInForce, decisions: DecisionLogStore):
        self.in_force = in_force
        self.log = decisions
        self._stops: set[threading.Event] = set()  # the open streams', so a drain can end them
        self._lock = threading.Lock()

    def watch_tenants(self, caller: str) -> list[str] | None:
        """The tenants whose records the caller may read (None: every record, those naming no
        tenant too); raises PermissionDenied when it may read none. The rule is
        `checkpoint.policy.audit_scope.readable_tenants`, which the auditor's web view asks too."""
        policies = self.in_force.current()
        try:
            return readable_tenants(policies.principals, policies.tenants, caller)
        except AuditRefused as refused:
            raise PermissionDenied(refused.code, refused.message) from None

    def watch(
        self, request: pb.WatchDecisionsRequest, stop: threading.Event, tenants: list[str] | None = None,
        caller: str | None = None,
    ) -> Iterator[pb.WatchDecisionsResponse]:
        """The records after `request.after_seq` of `tenants` (None: all), then new ones as they
        are committed. With `caller`, the caller's scope is asked again whenever the policy set in
        force changes, before the next record goes out: a person taken off a tenant's auditors
        stops reading it then (PERMISSION_DENIED when nothing is left), not when the stream ends."""
        if request.after_seq < 0:
            raise InvalidArgument("invalid_request", "after_seq must not be negative", "after_seq")
        filters: Filters = {
            "run_id": request.run_id or None,
            "root_run_id": request.root_run_id or None,
            "agent": request.agent or None,
            "code": request.code or None,
            "verdict": convert.verdict_name(request.verdict) if request.verdict else None,
            "tenants": tenants,
        }
        if request.no_follow:
            records = self.log.read(request.after_seq, **filters)
        else:
            records = self.log.follow(request.after_seq, stop_event=stop, **filters)
        with self._lock:
            self._stops.add(stop)
        # None: the scope is asked again before the first record too, since `tenants` was worked
        # out from whatever policy set was in force then, and a reload may have landed since
        revision: str | None = None
        allowed = tenants
        try:
            for record in records:
                if stop.is_set():
                    return
                if caller is not None:
                    current = self.in_force.store.current  # one attribute read per record
                    if current is not None and current.revision != revision:
                        revision = current.revision
                        fresh = self.watch_tenants(caller)  # PermissionDenied ends the stream
                        # only ever narrower than the query the stream was opened with
                        allowed = fresh if allowed is None else [t for t in allowed if fresh is None or t in fresh]
                    if allowed is not None and record.get("tenant") not in allowed:
                        continue
                yield pb.WatchDecisionsResponse(record=convert.record_to_proto(record))
        finally:
            with self._lock:
                self._stops.discard(stop)

    def wake_watchers(self) -> None:
        self.log.wake_followers()

    def stop_watchers(self) -> None:
        with self._lock:
            stops = list(self._stops)
        for stop in stops:
            stop.set()
        self.log.wake_followers()
