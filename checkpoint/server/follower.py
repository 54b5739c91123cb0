"""How current a follower of the shared database is: the ended runs' feed and the catalog's feed
each keep a memory read from PostgreSQL, and each must tell, to within `max_age` seconds, whether
that memory holds every change committed before. This is the part they share: when the newest
read that left the memory current began, when a read last failed and why, and telling the
listener (health) each time the follower turns current or not.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable


class Currency:
    """One follower's currency. `name` starts its log lines ("catalog", "ended runs"); `back` is what
    they say when it is current again, `lost` (with a %s for the error) when it is not."""

    def __init__(self, *, max_age: float, on_current: Callable[[bool], None] | None, log: logging.Logger,
                 name: str, back: str, lost: str) -> None:
        self.max_age = max_age
        self.fresh_at = -math.inf  # time.monotonic() at which the newest read that left it current began
        self.failed_at = -math.inf
        self.error = "not read yet"
        self._on_current = on_current
        self._log = log
        self._name, self._back, self._lost = name, back, lost
        self._current: bool | None = None
        self._lock = threading.Lock()

    @property
    def age(self) -> float:
        return time.monotonic() - self.fresh_at

    @property
    def current(self) -> bool:
        """Whether the memory is known current now (health)."""
        return self.age <= self.max_age

    @property
    def failing(self) -> bool:
        """Whether a read failed since the newest one that succeeded: the database slow or gone."""
        return self.failed_at >= self.fresh_at

    def read_began(self, began: float) -> None:
        """A read that began at `began` (time.monotonic()) left the memory current; health hears it."""
        self.fresh_at = max(self.fresh_at, began)
        self.report(True)

    def failed(self, exc: BaseException) -> None:
        self.failed_at = time.monotonic()
        self.error = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        self._log.debug("%s not read: %s", self._name, self.error)
        if self.age > self.max_age:
            self.report(False)

    def report(self, current: bool) -> None:
        with self._lock:
            if current == self._current:
                return
            self._current = current
            if current:
                self._log.info("%s: %s", self._name, self._back)
            else:
                self._log.error(f"{self._name}: {self._lost}", self.error)
            if self._on_current is not None:
                self._on_current(current)

    def ago(self) -> str:
        """When the memory was last read, for a refusal's reason."""
        age = self.age
        return "never" if math.isinf(age) else f"{age:.1f}s ago"
