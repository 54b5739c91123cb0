"""Which drivers are alive: lease rows by the database's clock, with fencing.

DBOS recovers only the workflows of an executor it is told is gone, and a self-hosted fleet must
tell it. Every driver renews its own row (`driver_leases.beat = now()`) every beat; one that sees
a row older than the TTL marks it dead in one conditional UPDATE (so one judge does it), ends the
dead driver's sessions (its advisory locks on runs go with them) and calls recovery for it until
nothing of it is left pending. The rules that keep a live driver's runs where they are:

- the database's clock, never a node's: a node whose clock is off judges no one wrongly;
- a dead row is never renewed: a driver that was only cut off (frozen, partitioned) finds its own
  row dead on its next beat and stops (`on_fenced`), for its runs are already elsewhere;
- nobody judges until it has itself renewed for a full TTL without a failure: an outage of the
  database stops every renewal at once, and when it ends every row looks old; the grace lets
  every live driver renew first, so an outage makes nobody look dead;
- an executor id is new at every process start (`new_executor_id`): a restarted process never
  renews the row of its previous life, which stays dead until its runs are taken over.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable

from warden.store.errors import StoreUnavailable
from warden.store.pg import Database

log = logging.getLogger("warden.driver.leases")

DEFAULT_TTL_SECONDS = 15.0


def new_executor_id() -> str:
    """Unique per process start: host, pid and a random part (short: it ends application names)."""
    return f"{socket.gethostname()[:20]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def application_name(role: str, executor_id: str) -> str:
    """What a driver's sessions call themselves, so a judge can end them all: `...:<executor id>`."""
    return f"warden-{role}:{executor_id}"[-63:]  # PostgreSQL keeps 63 bytes; the id is the tail


class Leases:
    """One driver's lease and its watch over the others.

    `recover(executor_id)` takes over what the dead executor left and returns how many of its
    workflows are still pending (those of another run-model version wait for a driver of that
    version); `on_fenced()` is called once this driver's own lease is found dead."""

    def __init__(self, db: Database, executor_id: str, version: str, *, ttl_seconds: float = DEFAULT_TTL_SECONDS,
                 recover: Callable[[str], int], on_fenced: Callable[[], None],
                 beat_seconds: float | None = None) -> None:
        if ttl_seconds <= 0:
            raise ValueError("the lease TTL must be positive")
        self.db = db
        self.executor_id = executor_id
        self.version = version
        self.ttl = float(ttl_seconds)
        self.beat_seconds = beat_seconds if beat_seconds is not None else max(0.05, self.ttl / 5)
        self._recover = recover
        self._on_fenced = on_fenced
        self._healthy_since: float | None = None  # monotonic time of the first renewal after a failure
        self.fenced = threading.Event()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def register(self) -> None:
        """This process's row; a row already there (an id reused) is not taken over."""
        with self.db.connection() as conn:
            added = conn.execute("INSERT INTO driver_leases (executor_id, run_model_version) VALUES (%s, %s) "
                                 "ON CONFLICT (executor_id) DO NOTHING", (self.executor_id, self.version)).rowcount
        if added != 1:
            raise ValueError(f"executor id {self.executor_id!r} is already listed: ids are one per process start")

    def renew(self) -> bool:
        """Renew this driver's lease; False (and fenced) when it was marked dead meanwhile."""
        with self.db.connection() as conn:
            row = conn.execute("UPDATE driver_leases SET beat = now() WHERE executor_id = %s AND NOT dead "
                               "RETURNING 1", (self.executor_id,)).fetchone()
        if row is None:
            if not self.fenced.is_set():
                self.fenced.set()
                log.error("lease %s was marked dead while this driver was cut off: stopping (its runs "
                          "are recovered elsewhere)", self.executor_id)
                self._on_fenced()
            return False
        if self._healthy_since is None:
            self._healthy_since = time.monotonic()
        return True

    @property
    def renewed_since_failure(self) -> bool:
        return self._healthy_since is not None

    def may_judge(self) -> bool:
        return self._healthy_since is not None and time.monotonic() - self._healthy_since >= self.ttl

    def judge(self) -> list[str]:
        """Mark every lease not renewed for the TTL dead (one judge per row: the UPDATE is
        conditional) and end its sessions; the ids this call marked."""
        if not self.may_judge():
            return []
        with self.db.transaction() as conn:
            dead = [r[0] for r in conn.execute(
                "UPDATE driver_leases SET dead = true, judged_by = %s, judged_at = now() "
                "WHERE executor_id <> %s AND NOT dead AND beat < now() - make_interval(secs => %s) "
                "RETURNING executor_id", (self.executor_id, self.executor_id, self.ttl)).fetchall()]
            for executor_id in dead:
                # a frozen driver still holds its sessions and the advisory locks on its runs:
                # ending them lets the runs move and makes any write it tries on waking fail
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                             "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                             "AND right(application_name, %s) = %s",
                             (len(executor_id) + 1, ":" + executor_id))
        for executor_id in dead:
            log.warning("driver %s: lease not renewed for %gs, marked dead by %s", executor_id, self.ttl,
                        self.executor_id)
        return dead

    def take_over(self) -> dict[str, int]:
        """Recover every dead executor; a row goes once nothing of it is pending (retried every
        beat, so commits a database crash lost or a recovery cut short are picked up again)."""
        with self.db.connection() as conn:
            dead = [r[0] for r in conn.execute("SELECT executor_id FROM driver_leases WHERE dead "
                                               "ORDER BY judged_at").fetchall()]
        left: dict[str, int] = {}
        for executor_id in dead:
            left[executor_id] = self._recover(executor_id)
            if left[executor_id] == 0:
                with self.db.connection() as conn:
                    conn.execute("DELETE FROM driver_leases WHERE executor_id = %s AND dead", (executor_id,))
        return left

    def beat(self) -> None:
        """One pass: renew, then (if renewed) judge and take over."""
        try:
            if not self.renew():
                return
            self.judge()
            self.take_over()
        except StoreUnavailable as exc:
            self._healthy_since = None  # judge again only a full TTL after the database is back
            log.warning("lease %s: %s", self.executor_id, exc)

    def start(self) -> None:
        self.register()
        self.renew()
        self._thread = threading.Thread(target=self._run, name="driver-leases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.beat_seconds) and not self.fenced.is_set():
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - the watcher must outlive a bug in one pass
                self._healthy_since = None
                log.exception("lease %s: the watch failed a pass", self.executor_id)

    def stop(self) -> None:
        """Stop renewing; the row stays, so the others judge it and recover what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
