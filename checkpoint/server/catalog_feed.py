"""Whether this replica's catalog and learnings are those of the shared database: followed, and
proven current to within a second.

A replica decides from a policy set in memory: the live and retired versions of the catalog, and
the active learnings, read when it was last refreshed. An act made at another replica (a version
approved or retired, a learning promoted) must be in force here within a second, and a replica
that cannot tell whether it is current must not decide as if it were. The PostgreSQL form of the
change counter (shared_state.py has SQLite's):

- every write to what is in force moves a counter of its store in the same transaction, and the
  counter's move is notified on commit (postgresql_store.py);
- a thread LISTENs on that channel and, on each notification and otherwise every `poll_interval`,
  reads the counters; when they moved since the policy set was refreshed, it refreshes it;
- `fresh_at` is when the newest read that left the policy set current began: every act committed
  before it is in force. A decision that finds it older than `max_age` catches up itself (unless
  reading failed since: then it leaves the retries to the thread) and, when it cannot, is refused
  (`catalog_unavailable`). A notification only wakes the thread early, so one lost or late
  never widens anything: the worst it does is leave a change to the next poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from checkpoint.policy.postgresql_store import CHANGES, CHANNEL
from checkpoint.server.follower import Currency
from warden.store.errors import StoreUnavailable
from warden.store.pg import Database

log = logging.getLogger("warden.checkpoint.catalog_feed")

MAX_AGE = 1.0  # seconds: the oldest catalog a decision may be made on
POLL_INTERVAL = 0.25
RETRY_AFTER = 0.2  # seconds the follower waits before it reads again after a failure
STOP_WITHIN = 0.5  # seconds: how soon close() is noticed while the follower waits
# seconds a late decision waits for a read under way (the follower's) before it refuses: a read
# that answers takes milliseconds, and a refusal should not hold its caller for long
CATCH_UP_WAIT = 0.2

_READ = f"SELECT store, version FROM {CHANGES}"


class CatalogFeed:
    """Keeps the policy set in force current with the catalog and learnings in `db`, or says it is not."""

    def __init__(self, db: Database, *, max_age: float = MAX_AGE, poll_interval: float = POLL_INTERVAL,
                 on_current: Callable[[bool], None] | None = None) -> None:
        self._db = db
        self._poll_interval = poll_interval
        self._refresh: Callable[[], None] = lambda: None
        self._applied: dict[str, int] | None = None  # the counters the policy set in force was refreshed at
        self._catching_up = threading.Lock()  # one reader at a time: the thread, or a late decision
        self._currency = Currency(max_age=max_age, on_current=on_current, log=log, name="catalog",
                                  back="following the shared store again",
                                  lost="whether it is current cannot be read (%s); decisions are refused "
                                       "catalog_unavailable")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="checkpoint-catalog-feed", daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, refresh: Callable[[], None]) -> CatalogFeed:
        """Read the counters once (StoreUnavailable when the database cannot give them), refresh
        with `refresh` (it must raise when it cannot read the catalog or the learnings), then follow."""
        self._refresh = refresh
        with self._db.connection() as conn:
            self._catch_up(conn)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=STOP_WITHIN + 5)

    # -- what decisions ask -------------------------------------------------------------------

    @property
    def current(self) -> bool:
        """Whether the policy set in force is known current now (health)."""
        return self._currency.current

    def require_current(self) -> None:
        """Nothing when the policy set in force holds every act committed up to `max_age` ago;
        else StoreUnavailable, once a catch-up here could not make it so."""
        if self._currency.current:
            return
        # The thread is late. Late because reading failed (the database slow or gone): refuse at
        # once and leave the retries to it, a decision waiting on the pool would hold its caller
        # for seconds. Otherwise (the process starved of CPU) catch up here, one caller at a time.
        if not self._currency.failing and self._catching_up.acquire(timeout=CATCH_UP_WAIT):
            try:
                if not self._currency.current:
                    with self._db.connection() as conn:
                        self._catch_up_locked(conn)
            except Exception as exc:  # noqa: BLE001 - whatever failed, the answer is a refusal below
                self._currency.failed(exc)
            finally:
                self._catching_up.release()
        if not self._currency.current:
            if not self._currency.failing:  # no read failed: one is under way, and slow
                self._currency.error = "the database is slow to answer"
            self._currency.report(False)
            raise StoreUnavailable(f"whether the catalog is current cannot be read ({self._currency.error}); "
                                   f"last read: {self._currency.ago()}")

    # -- reading the database -----------------------------------------------------------------

    def _catch_up(self, conn: Any) -> None:
        with self._catching_up:
            self._catch_up_locked(conn)

    def _catch_up_locked(self, conn: Any) -> None:
        """Read the counters; when they moved since the last refresh, refresh. Then current as of
        when the read began (the refresh reads at least what the counters said)."""
        began = time.monotonic()
        counters = {store: int(version) for store, version in conn.execute(_READ).fetchall()}
        if counters != self._applied:
            self._refresh()
            self._applied = counters
        self._currency.read_began(began)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                with self._db.connection() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    try:
                        self._catch_up(conn)  # what was notified before the LISTEN began is read here
                        while not self._stop.is_set():
                            self._wait(conn)
                            self._catch_up(conn)
                    finally:
                        if not conn.closed:
                            # the connection goes back to the pool: it must not keep collecting notifications
                            conn.execute("UNLISTEN *")
            except Exception as exc:  # noqa: BLE001 - whatever broke, decisions refuse once the memory is old
                self._currency.failed(exc)
                self._stop.wait(max(self._poll_interval, RETRY_AFTER))

    def _wait(self, conn: Any) -> None:
        """Until a notification, the next poll, or close(): a notification is a wake-up only, the
        counters themselves are read next."""
        deadline = time.monotonic() + self._poll_interval
        while not self._stop.is_set() and (left := deadline - time.monotonic()) > 0:
            if any(True for _ in conn.notifies(timeout=min(left, STOP_WITHIN), stop_after=1)):
                return
