"""Hearing that a run changed at any driver on the shared store: a thread LISTENs, on a connection
of its own, on the channel each event append and status move NOTIFYs (the run id), and wakes
every follower waiting here; each follower reads its own run again. A lost connection is listened
on again, and a follower that hears nothing still reads every `poll_seconds` (following.py), so a
notification lost in between delays an event, never loses it."""

from __future__ import annotations

import logging
import threading

import psycopg

from driver.runs.postgresql_schema import CHANNEL
from warden.store.errors import StoreUnavailable
from warden.store.pg import Database
from warden.store.url import StoreUrl

log = logging.getLogger("warden.driver.runs")

LISTEN_RETRY = 0.5  # seconds before listening again after losing the connection


class RunNotices:
    """Started by the first follower; stopped with the store."""

    def __init__(self, url: StoreUrl) -> None:
        self._url = url
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def wait(self, seconds: float) -> None:
        """Until a run changed somewhere, or `seconds` passed."""
        self._start()
        with self._changed:
            self._changed.wait(seconds)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _start(self) -> None:
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._listen, name="driver-runs-listen", daemon=True)
                self._thread.start()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with Database(self._url, name="driver-listen", max_size=1) as db, db.connection() as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._wake()  # what was notified before the LISTEN began is read now
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=0.5):
                            self._wake()
            except (StoreUnavailable, psycopg.Error) as exc:
                log.debug("run notices: not listening (%s); followers poll", exc)
                self._stop.wait(LISTEN_RETRY)

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
