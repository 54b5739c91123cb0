"""Health follows a shared store: a process whose database is away can do nothing that needs it,
so it says NOT_SERVING (load balancers route around it) until the database answers again, without
a restart. A SQLite store beside the process always answers and needs no watch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 2.0


class StoreWatch:
    """Calls `on_change(serving)` each time `ping()` turns from answering to not, or back.
    `what` names the store in the log ("the runs' store postgresql://warden@db/warden")."""

    def __init__(self, ping: Callable[[], bool], on_change: Callable[[bool], None], what: str,
                 interval: float = INTERVAL_SECONDS) -> None:
        self._ping = ping
        self._on_change = on_change
        self._what = what
        self._interval = interval
        self._stop = threading.Event()
        self._serving = True
        self._thread = threading.Thread(target=self._watch, name="store-watch", daemon=True)

    @property
    def serving(self) -> bool:
        return self._serving

    def start(self) -> StoreWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._interval + 5)

    def _watch(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                serving = self._ping()
            except Exception:  # noqa: BLE001 - a ping that fails in any way is a store that does not answer
                serving = False
            if serving != self._serving:
                self._serving = serving
                if serving:
                    log.warning("%s answers again: serving", self._what)
                else:
                    log.error("%s does not answer: NOT_SERVING, calls refused with store_unavailable "
                              "until it does", self._what)
                self._on_change(serving)
