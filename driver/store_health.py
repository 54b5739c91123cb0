"""Health follows the runs' store: a driver whose shared database is away can neither start, show
nor move a run, so it says NOT_SERVING (load balancers route to another driver) until the database
answers again, without a restart. A SQLite store beside the process always answers.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("warden.driver.service")

INTERVAL_SECONDS = 2.0


class StoreWatch:
    """Calls `on_change(serving)` each time `ping()` turns from answering to not, or back."""

    def __init__(self, ping: Callable[[], bool], on_change: Callable[[bool], None],
                 interval: float = INTERVAL_SECONDS) -> None:
        self._ping = ping
        self._on_change = on_change
        self._interval = interval
        self._stop = threading.Event()
        self.serving = True
        self._thread = threading.Thread(target=self._watch, name="driver-store-watch", daemon=True)

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
            if serving != self.serving:
                self.serving = serving
                if serving:
                    log.warning("the runs' store answers again: serving")
                else:
                    log.error("the runs' store does not answer: NOT_SERVING, calls refused with "
                              "store_unavailable until it does")
                self._on_change(serving)
