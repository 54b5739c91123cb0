"""Which runs ended, as one replica on a shared PostgreSQL store knows it: a memory never older than a second.

Every Check asks whether its run, or a run it descends from, ended. A round trip to the database on
every decision would put the database's latency (and its every hiccup) on every answer, so each
replica keeps the ends in memory and proves that memory current instead:

- a thread holds one connection that LISTENs on the channel the ended-runs table's trigger notifies:
  an end made at any replica reaches this one within milliseconds;
- the same thread polls between notifications (every `poll_interval`) for the rows it has not seen:
  a notification lost (a reconnect, a replica that missed one) is found there;
- `fresh_at` is when the newest successful poll's snapshot was taken: every end committed before it
  is in memory. A lookup that finds it older than `max_age` polls itself (unless reading failed
  since: then it leaves the retries to the thread), and when it cannot, raises: the checkpoint
  refuses `run_state_unavailable` rather than answer from a memory it cannot vouch for. A notification may only add an end, so a late or lost one never widens anything.

A poll reads by transaction id: a row is new when the transaction that wrote it had not ended at the
previous poll's snapshot (its xid at or above that snapshot's xmin), so an end that commits after a
later-numbered one is never skipped, and polls may overlap. Ends older than `horizon` (the lifetime
of a run token, and a margin) are neither loaded nor kept: every token of such a run has expired.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from checkpoint.server.follower import Currency
from warden.store.errors import StoreUnavailable
from warden.store.pg import Database

log = logging.getLogger("warden.checkpoint.ended_runs")

TABLE = "checkpoint_ended_runs"
CHANNEL = "warden_checkpoint_ended_runs"
MAX_AGE = 1.0  # seconds: the oldest memory of ended runs a decision may be made on
POLL_INTERVAL = 0.25
RETRY_AFTER = 0.2  # seconds the follower waits before it reads again after a failure
PRUNE_EVERY = 60.0

_SINCE = f"SELECT run_id, how, extract(epoch from at)::float8 FROM {TABLE} WHERE xid >= %s::xid8"
_RECENT = f"SELECT run_id, how, extract(epoch from at)::float8 FROM {TABLE} WHERE at > now() - make_interval(secs => %s)"


class EndedRunsFeed:
    """The ends of runs in `db`'s ended-runs table, current to within `max_age` seconds, or an error."""

    def __init__(self, db: Database, *, horizon: float, max_age: float = MAX_AGE,
                 poll_interval: float = POLL_INTERVAL, prune_every: float = PRUNE_EVERY,
                 on_current: Callable[[bool], None] | None = None) -> None:
        self._db = db
        self._horizon = horizon
        self._max_age = max_age
        self._poll_interval = poll_interval
        self._prune_every = prune_every
        self._ends: dict[str, tuple[str, float]] = {}  # run id -> (how it ended, when: the database's epoch)
        self._lock = threading.Lock()  # the memory and its watermark
        self._lookup_poll = threading.Lock()  # one lookup polls at a time; the others wait for it, briefly
        self._xmin: str | None = None  # the newest merged poll's snapshot xmin; None: nothing loaded yet
        # fresh_at: time.monotonic() at which that snapshot was taken, or a bit before
        self._currency = Currency(max_age=max_age, on_current=on_current, log=log, name="ended runs",
                                  back="reading the shared store again",
                                  lost="the shared store cannot be read (%s); runs are refused run_state_unavailable")
        self._pruned_at = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="checkpoint-ended-runs", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> EndedRunsFeed:
        """Load the ends (StoreUnavailable when the database cannot give them), then follow them."""
        with self._db.connection() as conn:
            self._poll(conn)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self._poll_interval + 5)

    # -- lookups ------------------------------------------------------------------------------

    def ended(self, run_ids: list[str]) -> tuple[str, str] | None:
        """(run id, how it ended) for the first of `run_ids` that ended, else None; StoreUnavailable
        when the memory is older than `max_age` and the database cannot bring it up to date."""
        self._require_current()
        for run_id in run_ids:
            found = self._ends.get(run_id)
            if found is not None:
                return run_id, found[0]
        return None

    @property
    def current(self) -> bool:
        """Whether lookups are answered now without reading the database first (health)."""
        return self._currency.current

    def note(self, run_id: str, how: str) -> None:
        """An end this replica has just committed: in force here at once (the first end stays)."""
        with self._lock:
            self._ends.setdefault(run_id, (how, time.time()))

    def _require_current(self) -> None:
        if self._currency.current:
            return
        # The follower is late. When it is late because reading failed (the database slow or gone),
        # refuse at once and leave the retries to it: a lookup that waited on the pool would hold its
        # caller for seconds. Otherwise (the process starved of CPU) poll here, one lookup at a time.
        if not self._currency.failing and self._lookup_poll.acquire(timeout=self._max_age):
            try:
                if not self._currency.current:
                    with self._db.connection() as conn:
                        self._poll(conn)
            except StoreUnavailable as exc:
                self._currency.failed(exc)
            finally:
                self._lookup_poll.release()
        if not self._currency.current:
            self._currency.report(False)  # health says so from the first refusal, not from the follower's next failure
            raise StoreUnavailable(f"the ended runs cannot be read ({self._currency.error}); "
                                   f"last read: {self._currency.ago()}")

    # -- reading the database -----------------------------------------------------------------

    def _poll(self, conn: Any) -> None:
        """Read what is new since the watermark, in one snapshot, and merge it."""
        began = time.monotonic()
        since = self._xmin
        with conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")  # the next two reads: one snapshot
            xmin, db_now = conn.execute(
                "SELECT pg_snapshot_xmin(pg_current_snapshot())::text, extract(epoch from now())::float8"
            ).fetchone()
            rows = conn.execute(_RECENT, (self._horizon,)) if since is None else conn.execute(_SINCE, (since,))
            found = rows.fetchall()
        with self._lock:
            for run_id, how, at in found:
                self._ends.setdefault(run_id, (how, at))
            if self._xmin is None or int(xmin) > int(self._xmin):
                self._xmin = xmin
            self._currency.fresh_at = max(self._currency.fresh_at, began)
            if began - self._pruned_at >= self._prune_every:
                self._pruned_at = began
                cutoff = db_now - self._horizon
                for run_id in [r for r, (_how, at) in self._ends.items() if at < cutoff]:
                    del self._ends[run_id]
        self._currency.report(True)

    def _heard(self, payload: str) -> None:
        try:
            note = json.loads(payload)
            run_id, how, at = str(note["run_id"]), str(note["how"]), float(note["at"])
        except (ValueError, KeyError, TypeError):
            log.warning("an ended-run notification that is not one: %.200r", payload)
            return  # the next poll reads the row itself
        with self._lock:
            self._ends.setdefault(run_id, (how, at))

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                with self._db.connection() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    try:
                        self._poll(conn)  # what was notified before the LISTEN began is read here
                        while not self._stop.is_set():
                            for notify in conn.notifies(timeout=self._poll_interval):
                                self._heard(notify.payload)
                            self._poll(conn)
                    finally:
                        if not conn.closed:
                            # the connection goes back to the pool: it must not keep collecting notifications
                            conn.execute("UNLISTEN *")
            except Exception as exc:  # noqa: BLE001 - whatever broke, lookups refuse once the memory is old
                self._currency.failed(exc)
                self._stop.wait(max(self._poll_interval, RETRY_AFTER))
