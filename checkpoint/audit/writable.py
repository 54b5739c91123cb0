"""Whether a decision log can be written now, the same way for every backend.

A failed commit makes the log unwritable and a commit that succeeds makes it writable again; while
it is unwritable a probe thread asks the backend (a file written and synced beside a SQLite log; a
ping of the PostgreSQL store) every `interval` seconds, so the log is seen writable again with no
decision needed to find out. The listener (the checkpoint's health) hears each change, in order.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class Writability:
    """The writable state of one log, its listener and its probe. `what` names the log in messages
    ("decision log /data/decisions.db")."""

    def __init__(self, what: str, probe: Callable[[], bool], interval: float, logger: logging.Logger) -> None:
        self._what = what
        self._log = logger
        self._probe = probe
        self._interval = interval
        self._writable = True
        self._lock = threading.Lock()  # changes reach the listener in the order they happen
        self._listener: Callable[[bool], None] | None = None
        self._stop = threading.Event()
        self._prober: threading.Thread | None = None

    @property
    def writable(self) -> bool:
        """False from a failed commit until a commit or a probe succeeds."""
        return self._writable

    def listen(self, callback: Callable[[bool], None]) -> None:
        """Call `callback(writable)` now and at every change from now on."""
        with self._lock:
            self._listener = callback
            callback(self._writable)

    def set(self, writable: bool) -> None:
        if writable == self._writable:  # the hot path: a commit while writable takes no lock
            return
        with self._lock:
            self._change(writable)

    def stop(self) -> None:
        """No probe from now on (the log is closing)."""
        self._stop.set()

    def _change(self, writable: bool) -> None:
        """The caller holds _lock."""
        if writable == self._writable:
            return
        self._writable = writable
        if writable:
            self._log.warning("%s is writable again", self._what)
        else:
            self._log.error("%s cannot be written: every decision is refused until it can", self._what)
        if self._listener is not None:
            self._listener(writable)
        if not writable and self._prober is None and not self._stop.is_set():
            self._prober = threading.Thread(target=self._probe_until_writable, name="decision-log-probe",
                                            daemon=True)
            self._prober.start()

    def _probe_until_writable(self) -> None:
        while not self._stop.wait(self._interval):
            probed = not self._writable and self._probe()
            with self._lock:  # ends only under the lock, so a new failure never finds it ending
                if self._writable or probed:
                    self._change(True)
                    self._prober = None
                    return
        with self._lock:
            self._prober = None
