"""A run's pinned authority: the policy revision in force when it started still binds it.

A run pins its agent version, and its run token names the policy revision in force when it began
(or when its delegation was allowed). A later edit of tools, rules, ceilings or off-limits subjects
must not widen what that run may do, while a narrowing edit applies to everyone at once. So a run
whose revision is not the current one is decided twice, under the current set and under its own,
and the stricter answer stands: DENY or HALT over REQUIRE_APPROVAL over ALLOW. The same holds for
an agent version the current files do not define (a widening edit of its tools or rules waits for
review): the revision it was recorded under bounds it too (PolicySet.version_bound). Old revisions
are compiled from the catalog's copy of their files (kept at every load), a few at a time, on demand.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from checkpoint.policy import PolicyLoadError, PolicySet
from checkpoint.policy.loader import load_policy_files
from checkpoint.server.runs import Refused
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.codes import POLICY_ERROR

_RANK = {pb.VERDICT_ALLOW: 0, pb.VERDICT_REQUIRE_APPROVAL: 1, pb.VERDICT_DENY: 2, pb.VERDICT_HALT: 2}


class PinnedPolicies:
    """Compiled old revisions, the most recently used kept. Each revision compiles under a lock of
    its own, so a slow compile of one never holds up the calls of runs pinned to another."""

    def __init__(self, keep: int = 16):
        self._keep = keep
        self._compiled: OrderedDict[str, PolicySet | Refused] = OrderedDict()  # a refusal: it does not compile
        self._lock = threading.Lock()
        self._compiling: dict[str, threading.Lock] = {}

    def get(self, current: PolicySet, revision: str) -> PolicySet:
        if revision == current.revision:
            return current
        with self._lock:
            found = self._compiled.get(revision)
            if found is not None:
                self._compiled.move_to_end(revision)
                if isinstance(found, Refused):
                    raise Refused(found.code, found.reason, found.rule)
                return found
            one = self._compiling.setdefault(revision, threading.Lock())
        with one:
            with self._lock:
                found = self._compiled.get(revision)
            if found is None:
                try:
                    found = self._compile(current, revision)
                except Refused as refused:
                    # a revision's files never change, so neither does the answer: kept, or every
                    # call of a run pinned to it would compile the whole folder again, one at a time
                    found = refused
            with self._lock:
                self._compiled[revision] = found
                self._compiled.move_to_end(revision)
                while len(self._compiled) > self._keep:
                    self._compiled.popitem(last=False)
                self._compiling.pop(revision, None)
        if isinstance(found, Refused):
            raise Refused(found.code, found.reason, found.rule)
        return found

    @staticmethod
    def _compile(current: PolicySet, revision: str) -> PolicySet:
        files = current.catalog.revision_files(revision)
        if files is None:
            raise Refused(POLICY_ERROR, f"the run's pinned policy revision {revision[:64]!r} is not in the "
                          "catalog, so what the run may do cannot be bounded by it", "pin")
        try:
            # compiled like any load; agent versions resolve through the same catalog
            return load_policy_files(files, f"<revision {revision}>", catalog=current.catalog,
                                     cel_engine=current.cel_engine, settle=False)
        except PolicyLoadError as exc:  # e.g. a CEL runtime that changed what it accepts
            raise Refused(POLICY_ERROR, f"the run's pinned policy revision {revision[:64]!r} no longer "
                          f"compiles: {str(exc)[:300]}", "pin") from None


def stricter(current: pb.CheckResponse, pinned: pb.CheckResponse, revision: str) -> pb.CheckResponse:
    """The answer that lets the run do less. Equal verdicts: the current one, with a delegation's
    child budget held to the smaller of the two grants."""
    if _RANK.get(pinned.verdict, 2) > _RANK.get(current.verdict, 2):
        pinned.reason += f" (under policy revision {revision}, which this run is pinned to: later edits do not widen it)"
        return pinned
    if current.verdict == pinned.verdict == pb.VERDICT_REQUIRE_APPROVAL:  # a person answers both sets' rules
        current.approval_rules.extend(r for r in pinned.approval_rules if r not in current.approval_rules)
    if current.verdict == pinned.verdict == pb.VERDICT_ALLOW and pinned.rule == "approval":
        current.rule, current.reason = pinned.rule, pinned.reason  # the approval was needed: say so
    if current.verdict == pb.VERDICT_ALLOW and current.HasField("child_budget"):
        for field in pb.Budget.DESCRIPTOR.fields:
            now, then = getattr(current.child_budget, field.name), getattr(pinned.child_budget, field.name)
            if then and (not now or then < now):
                setattr(current.child_budget, field.name, then)
    return current
