"""What other workers changed in the shared stores, seen before the next decision (`--workers N`).

A worker that approves, retires or promotes refreshes its own policy set at once; the others
must not go on deciding under the old catalog or learnings. SQLite's `PRAGMA data_version`
changes on a connection whenever another connection committed to the file, and costs a few
microseconds, so each request asks it (the store module's `ChangeCounter`: a read-only connection
of its own per store) and
refreshes the policy set first when either store moved. Requests wait for that refresh: an
act another worker has answered binds every decision that starts after the answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from checkpoint.policy.sqlite_store import ChangeCounter

log = logging.getLogger("warden.checkpoint.shared")


class SharedStateWatch:
    def __init__(self, paths: list[Path], refresh: Callable[[], None]):
        self._counters = [ChangeCounter(p) for p in paths]
        self._refresh = refresh
        self._lock = threading.Lock()
        self._versions = self._read()

    def _read(self) -> list[int]:
        return [counter.read() for counter in self._counters]

    def sync(self) -> None:
        # Asked without the lock first: on every request of every handler thread, a lock held
        # across the two reads (each lets go of the GIL) made the threads queue behind each other.
        # Nothing moved is the common case; a move is re-read under the lock, so one thread
        # refreshes and the others wait for it. The connections are shared between threads:
        # SQLite is built serialized here (sqlite3.threadsafety 3) and a statement another
        # thread is stepping is never reused.
        if self._read() == self._versions:
            return
        with self._lock:
            versions = self._read()
            if versions != self._versions:
                self._refresh()
                # taken after the refresh succeeded: a failed one is tried again by the next request
                self._versions = versions

    def close(self) -> None:
        with self._lock:
            for counter in self._counters:
                counter.close()
