"""Removes containers the runner left behind (a crash, a kill -9, a daemon hiccup).

Every container carries a deadline label: its timeout plus a grace period from when it was
created. No live runner keeps a container past it, so removing what is past its deadline is
safe even when several runners share one daemon. It runs once at start and then on a timer.
"""

from __future__ import annotations

import logging
import threading
import time

import docker
import docker.errors

from toolrunner.container import LABEL, LABEL_DEADLINE

log = logging.getLogger(__name__)


def reap_once(api: docker.APIClient, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    removed: list[str] = []
    for c in api.containers(all=True, filters={"label": LABEL}):
        labels = c.get("Labels") or {}
        try:
            deadline = float(labels.get(LABEL_DEADLINE, "0"))
        except ValueError:
            deadline = 0.0  # a label we did not write: treat as long overdue
        if deadline > now:
            continue
        try:
            api.remove_container(c["Id"], force=True)
            removed.append(c["Id"])
            log.warning("reaped leftover container %s (%s)", c["Id"][:12], labels.get("warden.tool", "?"))
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            # 409: another runner on the same daemon is already removing it; that is the goal
            if exc.status_code != 409:
                raise
    return removed


class Reaper:
    def __init__(self, api: docker.APIClient, interval_seconds: float = 30.0):
        self._api = api
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> list[str]:
        removed = reap_once(self._api)
        self._thread = threading.Thread(target=self._loop, name="reaper", daemon=True)
        self._thread.start()
        return removed

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                reap_once(self._api)
            except Exception as exc:  # the engine may be restarting; try again next tick
                log.warning("reaper: %s", exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5)
