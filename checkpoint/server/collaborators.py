"""The parts of the checkpoint an act is made of, as named objects handed to it: the policies in
force, the recorder that puts a record on the log before its answer leaves, and the state of runs
(tokens, ends, act ids). The service builds one of each and passes them to every act family, so
an act reaches nothing else of the service, and a test can build an act from these alone."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from checkpoint.audit.port import DecisionLogStore
from checkpoint.audit.record import DecisionRecord
from checkpoint.policy import PolicySet
from checkpoint.policy.pinned import PinnedVersions
from checkpoint.policy.pinned import load as load_pinned
from checkpoint.policy.principals import Principal
from checkpoint.server import convert, tracing
from checkpoint.server.answers import fail_closed
from checkpoint.server.metrics import Metrics
from checkpoint.server.reload import PolicyStore
from checkpoint.server.runs import Established, Refused, RunTokens
from checkpoint.server.single_use import SingleUseStore
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import Unavailable
from warden.store.errors import StoreError

log = logging.getLogger("warden.checkpoint.service")


class PoliciesInForce:
    """The policy set every decision and act reads: one reference per request, so a reload
    landing mid-request changes nothing of it."""

    def __init__(self, store: PolicyStore):
        self.store = store
        # set when other processes share the data folder (`serve --workers N`): see shared_state.py
        self.sync_shared: Callable[[], None] | None = None
        # set on a shared PostgreSQL store: raises when the catalog in memory may not be current
        # (catalog_feed.py); None: the catalog is this process's own files, current by construction
        self.catalog_current: Callable[[], None] | None = None

    def current(self) -> PolicySet:
        if self.sync_shared is not None:
            self.sync_shared()  # another worker's catalog or learning act counts from now on
        policies = self.store.current
        if policies is None:
            raise Unavailable("policy_error", "no policy set is loaded; see the checkpoint's health details")
        return policies

    def refresh(self) -> None:
        """An act changed the catalog or the learnings: the next request reads the change."""
        self.store.refresh()

    def require_current_catalog(self) -> None:
        """Refused `catalog_unavailable` when this replica cannot tell that its catalog and learnings
        are those of the shared store: a decision never stands on a catalog that may be old."""
        if self.catalog_current is None:
            return
        try:
            self.catalog_current()
        except Exception as exc:  # noqa: BLE001 - fail closed, and say why
            raise Refused(codes.CATALOG_UNAVAILABLE, f"the catalog may not be current: {str(exc)[:200]}",
                          "catalog") from None

    def pinned_versions(self, policies: PolicySet, request: pb.CheckRequest) -> PinnedVersions:
        """The versions `request` names, read from the catalog before decide() (pinned.py); a catalog
        that cannot be read refuses `catalog_unavailable`."""
        try:
            return load_pinned(policies, request)
        except StoreError as exc:
            raise Refused(codes.CATALOG_UNAVAILABLE, f"the catalog cannot be read: {str(exc)[:200]}",
                          "catalog") from None


class Recorder:
    """Writes each record to the decision log before its answer leaves, and counts each answer."""

    def __init__(self, decisions: DecisionLogStore, metrics: Metrics):
        self.log = decisions
        self.metrics = metrics
        self._decision_counters: dict[tuple[int, str], Any] = {}

    def append(self, record: DecisionRecord | dict[str, Any]) -> int:
        """Append a record, with the trace id of the call being served (the `traceparent` its caller
        sent, read once per RPC by the gRPC layer: checkpoint/server/tracing.py)."""
        if isinstance(record, DecisionRecord):
            if record.trace_id is None:
                record.trace_id = tracing.current.get()
        elif record.get("trace_id") is None:
            record["trace_id"] = tracing.current.get()
        return self.log.append(record)

    def append_or_deny(self, record: DecisionRecord | dict[str, Any], response: pb.CheckResponse) -> bool:
        """Record before answering: when the log cannot take the record, the answer is a DENY
        (and False)."""
        try:
            self.append(record)
            return True
        except Exception as exc:  # AuditUnavailable, or anything else: no answer without its record
            self.metrics.audit_failures.inc()
            log.error("decision %s not recorded, denying: %s", response.decision_id, exc)
            response.CopyFrom(fail_closed(
                response, "audit_unavailable", "the decision could not be recorded", rule="audit"
            ))
            return False

    def count_shadow_flip(self, enforced: str, enforced_code: str, shadow: tuple[str, str, str]) -> None:
        """Count a recorded answer whose shadow differs in verdict or code (the records that
        `warden audit query --shadow-flips` lists)."""
        shadow_verdict, shadow_code, _rule = shadow
        if shadow_verdict != enforced or shadow_code != enforced_code:
            self.metrics.shadow_flips.labels(enforced, shadow_verdict).inc()

    def count(self, verdict: int, code: str) -> None:
        # prometheus_client's labels() costs a lock and a few dict lookups per call; the
        # (verdict, code) pairs are few, so their children are kept here.
        key = (verdict, code)
        child = self._decision_counters.get(key)
        if child is None:
            child = self.metrics.decisions.labels(convert.verdict_name(verdict), code)
            self._decision_counters[key] = child
        child.inc()

    def read(self, *args: Any, **filters: Any) -> Any:
        """Records already on the log (an approval's REQUIRE_APPROVAL, a run's past calls)."""
        return self.log.read(*args, **filters)

    def on_log(self, decision_id: str, run_id: str) -> bool:
        """Whether decision `decision_id` of run `run_id` is on the log (run_id narrows the search to
        the run's records, which are indexed). Raises when the log cannot be read."""
        return next(iter(self.log.read(run_id=run_id, decision_id=decision_id, limit=1)), None) is not None


class RunState:
    """What the checkpoint knows of runs: the tokens it issued, the runs that ended, and the act
    ids already taken. A store that cannot say refuses (fail closed)."""

    def __init__(self, runs: RunTokens, single_use: SingleUseStore):
        self.tokens = runs
        self.single_use = single_use

    def establish(self, request: Any, principal: Principal, caller: str, at: float | None = None) -> Established:
        """The run the request's token establishes (its run context replaced by the token's), if
        the token was issued to this principal (and, when it binds one, to this credential), alive
        at `at` (default: now)."""
        established = self.tokens.establish(request, at)
        if established.principal != principal.name or established.caller not in ("", caller):
            raise Refused(codes.RUN_TOKEN_INVALID, "the run token was issued to another caller", "run_token")
        return established

    def refuse_ended(self, established: Established) -> None:
        """Refused `run_ended` when the run, or any run it descends from, ended or was cancelled. The
        driver stops such a run itself, but it is not trusted for authority: the checkpoint's own
        store says whether a run may still act, and a store that cannot say refuses."""
        run = established.run
        ids = [run.run_id, run.parent_run_id, run.root_run_id, *(link.run_id for link in run.actor_chain)]
        try:
            found = self.single_use.ended(ids)
        except Exception as exc:  # noqa: BLE001 - fail closed, and say why
            raise Refused(codes.RUN_STATE_UNAVAILABLE, f"whether the run ended cannot be read: {str(exc)[:200]}",
                          "run_token") from None
        if found is not None:
            ended, how = found
            whose = f"run {ended}" if ended == run.run_id else f"run {run.run_id} descends from run {ended}, which"
            raise Refused(codes.RUN_ENDED, f"{whose} ended ({how[:200]}): it acts no more", "run_token")

    def end_run(self, established: Established, how: str) -> None:
        """Mark the run ended in the shared store before its act is answered: from that answer on,
        no worker allows anything of it or of the runs it started."""
        try:
            self.single_use.end_run(established.run.run_id, how)
        except Exception as exc:  # noqa: BLE001
            raise Refused(codes.RUN_STATE_UNAVAILABLE, f"the run's end cannot be kept: {str(exc)[:200]}",
                          "run_token") from None

    def claim_act(self, key: str, decision_id: str) -> str | None:
        """Take a caller's act id once: None when this is the first, else the first's decision id."""
        return self.single_use.claim(key, decision_id)

    def release_act(self, key: str, decision_id: str) -> None:
        self.single_use.release(key, decision_id)
