"""Per-version statistics of agents, computed from the decision log alone (docs/catalog.md,
"Statistics").

The log is the record, so the figures are a fold over it, in seq order, and can always be
recomputed from scratch: nothing else is kept, and a restart loses nothing. For one agent version:

- runs: distinct runs with at least one record of that agent@version (a run's records all carry
  the version its token pinned; catalog acts are not a run's, so they do not count);
- succeeded, failed, cancelled: runs whose last `end` record has that status (an end that was
  superseded, e.g. a status write that lost a race to a cancel, is followed by a correcting end);
- paused: runs that paused at least once (an `end` with status paused: a breaker, a handoff,
  unmet criteria, a refusal; a person's own pause is the act `pause`, not the agent's doing);
  pauses: how many times;
- open: runs with no terminal end yet (running, waiting, paused now);
- breaker_trips: HALT records with code `breaker_<name>`, by name;
- tokens: per run, the tokens its last `end` reported (the run's total so far); their sum and
  average over the runs that reported one.

`AgentStats` keeps the fold and adds what was committed since its last look (`current`), so a
read costs the new records only; `recompute` starts over from seq 1.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from checkpoint.audit import store
from checkpoint.audit.spans import Spans

END_ACT = "end"
PAUSED = "paused"
TERMINAL = ("succeeded", "failed", "cancelled")
END_STATUSES = (*TERMINAL, PAUSED)
BREAKER_PREFIX = "breaker_"
MAX_CODE = 64
# What an `end` record's `arguments.details` holds; every other key is refused when it is recorded.
END_FIELDS = frozenset({"status", "code", "tokens", "turns", "instead_of"})
_PAGE = 5000
# Only the columns the fold reads; `arguments` only where it is needed (an end), so a scan does not
# move every tool call's arguments out of SQLite.
_SELECT = (f"SELECT seq, tenant, run_id, agent, agent_version, action, verdict, code, "
           f"CASE WHEN action = '{END_ACT}' THEN arguments END FROM {store.TABLE} "
           "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?")
_NO_END = 2**62


class EndInvalid(ValueError):
    """An `end` act whose details are not what the statistics read."""


def end_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """The details of a run's `end` as they are recorded: `status` (succeeded, failed, cancelled,
    paused), `code` (the run's stable code), `tokens` and `turns` (the run's totals so far, whole
    numbers >= 0), and, for an end that corrects one before it, `instead_of` (the status that end
    claimed). Raises EndInvalid for anything else."""
    unknown = sorted(set(details) - END_FIELDS)
    if unknown:
        raise EndInvalid(f"unknown field(s) in an end's details: {', '.join(unknown)[:200]}")
    status = details.get("status")
    if status not in END_STATUSES:
        raise EndInvalid(f"an end's status is one of {', '.join(END_STATUSES)}")
    code = details.get("code", "")
    if not isinstance(code, str) or len(code) > MAX_CODE:
        raise EndInvalid(f"an end's code is a string of at most {MAX_CODE} characters")
    out: dict[str, Any] = {"status": status, "code": code}
    for name in ("tokens", "turns"):
        value = details.get(name, 0)
        # a Struct carries numbers as doubles: 1234.0 is 1234, 1.5 and -1 are refused
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value) \
                or value > 2**53:
            raise EndInvalid(f"an end's {name} is a whole number >= 0")
        out[name] = int(value)
    instead_of = details.get("instead_of")
    if instead_of is not None:
        if instead_of not in END_STATUSES:
            raise EndInvalid(f"an end's instead_of is one of {', '.join(END_STATUSES)}")
        out["instead_of"] = instead_of
    return out


@dataclass
class VersionStats:
    """The figures of one agent version (see the module docstring)."""

    agent: str
    version: str
    tenant: str
    first_seq: int  # its first record: versions the catalog does not know are ordered by it
    runs: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    paused: int = 0
    pauses: int = 0
    breaker_trips: dict[str, int] = field(default_factory=dict)
    tokens: int = 0
    runs_with_tokens: int = 0

    @property
    def open(self) -> int:
        return self.runs - self.succeeded - self.failed - self.cancelled

    @property
    def average_tokens(self) -> float:
        return self.tokens / self.runs_with_tokens if self.runs_with_tokens else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"agent": self.agent, "version": self.version, "tenant": self.tenant, "runs": self.runs,
                "succeeded": self.succeeded, "paused": self.paused, "failed": self.failed,
                "cancelled": self.cancelled, "open": self.open, "pauses": self.pauses,
                "breaker_trips": dict(sorted(self.breaker_trips.items())), "tokens": self.tokens,
                "runs_with_tokens": self.runs_with_tokens, "average_tokens": round(self.average_tokens, 1)}


class _Run:
    __slots__ = ("outcome", "pauses", "tokens")

    def __init__(self) -> None:
        self.outcome: str | None = None  # its last end's terminal status; None while open
        self.pauses = 0
        self.tokens: int | None = None


class _Version:
    __slots__ = ("tenant", "first_seq", "runs", "outcomes", "paused", "pauses", "breakers", "tokens", "with_tokens")

    def __init__(self, tenant: str, first_seq: int) -> None:
        self.tenant = tenant
        self.first_seq = first_seq
        self.runs: dict[str, _Run] = {}
        self.outcomes: Counter[str] = Counter()
        self.paused = self.pauses = self.tokens = self.with_tokens = 0
        self.breakers: Counter[str] = Counter()


# seq, tenant, run_id, agent, agent_version, action, verdict, code, arguments (text, ends only)
Row = tuple[int, str | None, str | None, str | None, str | None, str, str, str | None, str | None]


class StatsFold:
    """The statistics of every agent version in the records folded so far. Counters are kept as
    each record arrives, so a snapshot costs the number of versions, not of runs."""

    def __init__(self) -> None:
        self.seq = 0  # the last record folded in
        self._versions: dict[tuple[str, str], _Version] = {}

    def add(self, row: Row) -> None:
        seq, tenant, run_id, agent, version, action, verdict, code, arguments = row
        self.seq = seq
        if not run_id or not agent or not version or action == "catalog":
            return  # no run (a refusal before one was established), or an act on the catalog
        key = (agent, version)
        acc = self._versions.get(key)
        if acc is None:
            acc = self._versions[key] = _Version(tenant or "", seq)
        run = acc.runs.get(run_id)
        if run is None:
            run = acc.runs[run_id] = _Run()
        if verdict == "HALT" and code and code.startswith(BREAKER_PREFIX):
            acc.breakers[code.removeprefix(BREAKER_PREFIX)] += 1
        elif action == END_ACT and verdict == "ALLOW" and arguments:
            self._end(acc, run, arguments)

    @staticmethod
    def _end(acc: _Version, run: _Run, arguments: str) -> None:
        try:
            details = end_details(json.loads(arguments).get("details") or {})
        except (ValueError, AttributeError):
            return  # the checkpoint records only valid ends; anything else is not counted
        status = details["status"]
        if details.get("instead_of") == PAUSED and run.pauses:
            # the pause claimed before did not happen (the run had ended, or was paused, otherwise)
            run.pauses -= 1
            acc.pauses -= 1
            if not run.pauses:
                acc.paused -= 1
        elif status == PAUSED and "instead_of" not in details:
            run.pauses += 1
            acc.pauses += 1
            if run.pauses == 1:
                acc.paused += 1
        outcome = status if status in TERMINAL else None
        if outcome != run.outcome:
            if run.outcome is not None:
                acc.outcomes[run.outcome] -= 1
            if outcome is not None:
                acc.outcomes[outcome] += 1
            run.outcome = outcome
        if run.tokens is None:
            acc.with_tokens += 1
            acc.tokens += details["tokens"]
        else:
            acc.tokens += details["tokens"] - run.tokens
        run.tokens = details["tokens"]

    def versions(self, agent: str | None = None) -> list[VersionStats]:
        """The figures of every version seen (of `agent`, when given), in order of first record."""
        out = []
        for (name, version), acc in self._versions.items():
            if agent is not None and name != agent:
                continue
            out.append(VersionStats(
                agent=name, version=version, tenant=acc.tenant, first_seq=acc.first_seq, runs=len(acc.runs),
                succeeded=acc.outcomes["succeeded"], failed=acc.outcomes["failed"],
                cancelled=acc.outcomes["cancelled"], paused=acc.paused, pauses=acc.pauses,
                breaker_trips={k: v for k, v in acc.breakers.items() if v}, tokens=acc.tokens,
                runs_with_tokens=acc.with_tokens))
        return sorted(out, key=lambda v: v.first_seq)


def fold(rows: Iterable[Row]) -> StatsFold:
    """The statistics of `rows` (oldest first) from scratch."""
    out = StatsFold()
    for row in rows:
        out.add(row)
    return out


def _fetch(conn: sqlite3.Connection, after: int, upto: int | None, limit: int) -> list[Row]:
    return conn.execute(_SELECT, (after, _NO_END if upto is None else upto, limit)).fetchall()


def read_rows(spans: Spans, after_seq: int = 0) -> Iterator[Row]:
    """The columns the fold reads, of every record after `after_seq`, across the sealed segments
    and the live file, in pages (no read transaction stays open while the caller folds)."""
    for rows in spans.pages(after_seq, None, _fetch, lambda row: row[0], _PAGE):
        yield from rows


class StatsSource(Protocol):
    """A log that is not a SQLite file (the PostgreSQL log: pg_reader.PgDecisionReader)."""

    def head(self) -> tuple[int, str] | None: ...

    def stats_rows(self, after_seq: int) -> Iterator[Row]: ...


class AgentStats:
    """The statistics of the decision log at `path` (or of `source`, when given), brought up to
    date on each read. Thread-safe: the RPC and the metrics scrape share one."""

    def __init__(self, path: str | Path, *, source: StatsSource | None = None) -> None:
        self.path = Path(path)
        self._source = source
        self._fold = StatsFold()
        self._lock = threading.Lock()

    def current(self, agent: str | None = None) -> tuple[int, list[VersionStats]]:
        """(the last record counted, the figures of every version of `agent`, or of all agents),
        after folding in what was committed since the last look."""
        with self._lock:
            self._catch_up()
            return self._fold.seq, self._fold.versions(agent)

    def recompute(self, agent: str | None = None) -> tuple[int, list[VersionStats]]:
        """`current`, after forgetting everything: the whole log is folded again."""
        with self._lock:
            self._fold = StatsFold()
            self._catch_up()
            return self._fold.seq, self._fold.versions(agent)

    def _catch_up(self) -> None:
        if self._source is not None:
            head = self._source.head()
            if head is None or head[0] < self._fold.seq:
                self._fold = StatsFold()
            for row in self._source.stats_rows(self._fold.seq):
                self._fold.add(row)
            return
        with Spans(self.path) as spans:
            head = spans.head()
            if head is None or head[0] < self._fold.seq:
                # an empty log, or another one than before (moved aside and started anew)
                self._fold = StatsFold()
            for row in read_rows(spans, self._fold.seq):
                self._fold.add(row)
