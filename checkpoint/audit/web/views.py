"""What the auditor's web view shows, read from the decision log: every answer is a JSON-ready
dict, every query bounded, every query narrowed to the tenants the reader may audit.

The log is opened read-only for each answer (as `warden audit query` opens it) and never held
open across a wait, so a view left open in a browser never keeps a read transaction alive.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from checkpoint.audit import heads
from checkpoint.audit.record import from_row
from checkpoint.audit.spans import Spans
from checkpoint.audit.stats import BREAKER_PREFIX, END_ACT, AgentStats
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import Anchor

if TYPE_CHECKING:
    from checkpoint.audit.pg_reader import PgDecisionReader, PgSpans

DEFAULT_LIMIT = 200
MAX_LIMIT = 1000
MAX_WAIT = 25.0  # a long poll answers within this, so no proxy or browser gives up on it first
TREE_LIMIT = 2000  # records of one delegation tree shown at most (the answer says when cut)
RUNS_LIMIT = 500
APPROVAL_ACTS = ("approval", "rejection")
REFUSED = ("DENY", "HALT")  # the verdicts that refuse a call: listed at a run's top, counted per run
RUN_STATUSES = ("open", "paused", "succeeded", "failed", "cancelled")


class DecisionViews:
    def __init__(self, log_path: Path, *, verify_interval: float = 5.0,
                 anchors_path: Path | None = None, pubkey_path: Path | None = None,
                 shared: PgDecisionReader | None = None) -> None:
        """`shared`: the PostgreSQL log a fleet shares, read instead of the file at `log_path`
        (whose folder still holds the signed heads and key the chain is checked against)."""
        self.log_path = Path(log_path)
        self._shared = shared
        self.stats = AgentStats(self.log_path, source=shared)
        self.verify_interval = verify_interval
        self.anchors_path = anchors_path
        self.pubkey_path = pubkey_path
        self._verify_lock = threading.Lock()
        self._verified: tuple[float, dict[str, Any]] | None = None

    # -- the decision stream --------------------------------------------------------------

    def decisions(
        self,
        after: int | None,
        limit: int,
        *,
        wait: float = 0.0,
        stop: threading.Event | None = None,
        **filters: Unpack[Filters],
    ) -> dict[str, Any]:
        """Without `after`: the newest `limit` matching records. With it: the records after that
        seq, oldest first, at most `limit`; when there are none yet, waits up to `wait` seconds
        for the log to grow. `cursor` is where the next poll goes on from: the head seen, or the
        last record returned when more were left (`more`)."""
        answer = self._decisions(after, limit, filters)
        if after is None or answer["records"] or wait <= 0:
            return answer
        deadline = time.monotonic() + min(wait, MAX_WAIT)
        stop = stop or threading.Event()
        while not stop.is_set() and time.monotonic() < deadline:
            # A head seq is one indexed read: cheap enough to ask four times a second.
            stop.wait(0.25)
            if self._head_seq() > answer["cursor"]:
                return self._decisions(answer["cursor"], limit, filters)
        return answer

    def _decisions(self, after: int | None, limit: int, filters: Filters) -> dict[str, Any]:
        with self._reader() as spans:
            head = spans.head()
            upto = head[0] if head else 0
            if after is None:
                rows = spans.newest(limit + 1, **filters)
                more = len(rows) > limit
                rows = list(reversed(rows[:limit]))
                # a record committed after `head` may be among the newest: go on after it
                cursor = max(upto, rows[-1]["seq"] if rows else 0)
            else:
                rows = list(islice(spans.rows(after, upto, **filters), limit + 1))
                more = len(rows) > limit
                rows = rows[:limit]
                cursor = rows[-1]["seq"] if more else max(upto, after)
        return {"records": [from_row(r) for r in rows], "cursor": cursor, "more": more}

    def _head_seq(self) -> int:
        with self._reader() as spans:
            head = spans.head()
        return head[0] if head else 0

    # -- runs -----------------------------------------------------------------------------

    def runs(self, limit: int, *, status: str | None = None, refused: bool = False,
             **filters: Unpack[Filters]) -> dict[str, Any]:
        """The runs most recently started (their `start_run` records that were allowed), each with
        its status and counts: records, DENY and HALT. `filters` narrow the start records (tenants,
        agent, person, since, until); `status` and `refused` narrow by what the run's records show, so up
        to RUNS_LIMIT starts are read to find `limit` that match (`scanned` says how many)."""
        wanted = limit if status is None and not refused else RUNS_LIMIT
        tenants = filters.get("tenants")
        with self._reader() as spans:
            starts = spans.newest(wanted, **{**filters, "action": "start_run", "verdict": "ALLOW"})
            shown = []
            for row in starts:
                summary = _run_summary(from_row(row))
                summary.update(_run_counts(spans.rows(run_id=summary["run_id"], tenants=tenants)))
                if status is not None and summary["status"] != status:
                    continue
                if refused and not (summary["denied"] or summary["halted"]):
                    continue
                shown.append(summary)
                if len(shown) >= limit:
                    break
        return {"runs": shown, "scanned": len(starts)}

    def run(self, run_id: str, tenants: list[str] | None) -> dict[str, Any] | None:
        """A run's delegation tree and its own timeline, breaker trips and approvals; None when
        no record of it is readable (another tenant's run is as absent as a made-up id)."""
        with self._reader() as spans:
            first = next(spans.rows(page=1, run_id=run_id, tenants=tenants), None)
            if first is None:
                return None
            root = first["root_run_id"] or run_id
            rows = list(islice(spans.rows(root_run_id=root, tenants=tenants), TREE_LIMIT + 1))
        truncated = len(rows) > TREE_LIMIT
        records = [from_row(r) for r in rows[:TREE_LIMIT]]
        mine = [r for r in records if r["run_id"] == run_id]
        return {
            "run_id": run_id,
            "root_run_id": root,
            "tree": _tree(records, root),
            "timeline": mine,
            "refusals": [r for r in mine if r["verdict"] in REFUSED],
            "breaker_trips": [r for r in mine if _is_breaker_trip(r)],
            "approvals": [r for r in mine if r["action"] in APPROVAL_ACTS or r["verdict"] == "REQUIRE_APPROVAL"],
            "truncated": truncated,
            "limit": TREE_LIMIT,
        }

    # -- the chain ------------------------------------------------------------------------

    def verify(self) -> dict[str, Any]:
        """The chain's verification status, shared by every reader: a walk of the whole log at
        most every `verify_interval` seconds, and at most a tenth of the time (after a walk of
        T seconds the next waits 10 T at least), so open pages never keep a core walking a
        large log. While a walk is under way, readers get the last status."""
        verified = self._verified
        if verified is not None and time.monotonic() < verified[0]:
            return verified[1]
        if not self._verify_lock.acquire(blocking=verified is None):
            return verified[1] if verified is not None else self.verify()
        try:
            verified = self._verified
            if verified is not None and time.monotonic() < verified[0]:
                return verified[1]  # another reader walked while this one waited
            started = time.monotonic()
            status = self._verify_now()
            took = time.monotonic() - started
            status["walk_seconds"] = round(took, 3)
            self._verified = (time.monotonic() + max(self.verify_interval, 10 * took), status)
            return status
        finally:
            self._verify_lock.release()

    def _verify_now(self) -> dict[str, Any]:
        from checkpoint.audit.reader import DecisionReader
        from checkpoint.audit.record import now

        checked_at = now()
        anchors, anchor_note = self._anchors()
        if isinstance(anchors, str):  # an anchor whose signature does not verify
            return {"ok": False, "checked": 0, "head_seq": 0, "head_hash": "", "broken_seq": None,
                    "reason": "anchor_signature", "detail": anchors, "anchors": 0, "anchors_note": anchor_note,
                    "checked_at": checked_at}
        report = (self._shared or DecisionReader(self.log_path)).verify(anchors=anchors)
        return {"ok": report.ok, "checked": report.checked, "head_seq": report.head_seq,
                "head_hash": report.head_hash, "broken_seq": report.broken_seq, "reason": report.reason,
                "detail": report.detail, "anchors": len(anchors), "anchors_note": anchor_note,
                "checked_at": checked_at}

    def _anchors(self) -> tuple[list[Anchor] | str, str]:
        """The signed heads the chain is checked against: the file and key given, else the data
        folder's own (which whoever can rewrite the log may have replaced: the note says so)."""
        path = self.anchors_path or heads.heads_path(self.log_path)
        if not path.exists():
            return [], "no signed heads: records deleted from the end would not show"
        key_file = self.pubkey_path or heads.key_path(self.log_path)
        try:
            public = heads.load_public_key(key_file)
            signed = heads.read_heads(path)
        except (OSError, ValueError) as exc:
            return f"signed heads {path.name} cannot be checked: {exc}", ""
        note = ("signed heads and key given to `warden audit serve`" if self.pubkey_path
                else "the data folder's signed heads, checked with the folder's own key (pass --pubkey for yours)")
        anchors = []
        for number, head in enumerate(signed, 1):
            if not head.verifies(public):
                return (f"anchor {number} of {path.name} (seq {head.seq}) does not verify with key "
                        f"{heads.key_id(public)}", note)
            anchors.append(head.anchor(f"anchor {number} of {path.name}"))
        return anchors, note

    # -- statistics -----------------------------------------------------------------------

    def agent_stats(self, tenants: list[str] | None) -> dict[str, Any]:
        """Every agent version's figures (docs/catalog.md, "Statistics"), of readable tenants.
        An agent belongs to one tenant, and all its runs' records carry it."""
        seq, versions = self.stats.current()
        shown = [v.as_dict() for v in versions if tenants is None or v.tenant in tenants]
        return {"seq": seq, "versions": shown}

    # -- helpers --------------------------------------------------------------------------

    def _reader(self) -> Spans | PgSpans:
        """The log's segments and live file, read-only, for one answer (closed by `with`); or the
        PostgreSQL log's rows."""
        if self._shared is not None:
            from checkpoint.audit.pg_reader import PgSpans

            return PgSpans(self._shared)
        return Spans(self.log_path)


def _is_breaker_trip(record: dict[str, Any]) -> bool:
    return record["verdict"] == "HALT" and (record["code"] or "").startswith(BREAKER_PREFIX)


def _run_summary(record: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": record["run_id"], "root_run_id": record["root_run_id"], "parent_run_id": record["parent_run_id"],
            "tenant": record["tenant"], "agent": record["agent"], "agent_version": record["agent_version"],
            "person": record["accountable_person"], "time": record["time"], "seq": record["seq"]}


def _end_status(record: dict[str, Any]) -> str | None:
    """The status an allowed `end` record sets (succeeded, failed, cancelled, paused), else None."""
    if record["action"] != END_ACT or record["verdict"] != "ALLOW" or not isinstance(record["arguments"], dict):
        return None
    details = record["arguments"].get("details")
    if isinstance(details, dict) and isinstance(details.get("status"), str):
        return str(details["status"])
    return None


def _run_counts(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """A run's records counted: all of them, DENY, HALT, and the status of its last end ("open"
    while it has none)."""
    counts: dict[str, Any] = {"decisions": 0, "denied": 0, "halted": 0, "status": "open"}
    for row in rows:
        record = from_row(row)
        counts["decisions"] += 1
        if record["verdict"] == "DENY":
            counts["denied"] += 1
        elif record["verdict"] == "HALT":
            counts["halted"] += 1
        counts["status"] = _end_status(record) or counts["status"]
    return counts


def _tree(records: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """The runs of a delegation tree, each with its parent, first and last record, how many
    records, breaker trips and approvals, and the status of its last `end`; in order of first
    record, so a parent comes before its children."""
    runs: dict[str, dict[str, Any]] = {}
    for r in records:
        run_id = r["run_id"]
        if not run_id:
            continue
        node = runs.get(run_id)
        if node is None:
            node = runs[run_id] = {
                "run_id": run_id, "parent_run_id": r["parent_run_id"] if run_id != root else None,
                "agent": r["agent"], "agent_version": r["agent_version"], "person": r["accountable_person"],
                "first_time": r["time"], "first_seq": r["seq"], "records": 0, "breaker_trips": 0,
                "approvals": 0, "status": None,
            }
        node["records"] += 1
        node["last_time"], node["last_seq"] = r["time"], r["seq"]
        if _is_breaker_trip(r):
            node["breaker_trips"] += 1
        if r["action"] in APPROVAL_ACTS:
            node["approvals"] += 1
        node["status"] = _end_status(r) or node["status"]
    return list(runs.values())
