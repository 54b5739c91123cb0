"""The policy set in force, and the watcher that swaps in a new one when the files change.

A reload is all or nothing: the new folder is loaded completely (`load_policy_dir` parses,
validates and compiles everything) before the reference is swapped, so a request sees either the
old set or the new one, never a mix. A broken edit keeps the last good set serving; its errors
are logged, counted and shown in health. Polling a snapshot of (path, mtime, size) is enough for
a folder of a few dozen files, works on every filesystem (inotify does not see bind-mounted
ConfigMap updates), and needs no extra dependency.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from checkpoint.policy import AgentCatalog, PolicyLoadError, PolicySet, load_policy_dir

log = logging.getLogger("warden.checkpoint.reload")

Snapshot = dict[str, tuple[int, int]]


@dataclass
class ReloadStatus:
    loaded: bool = False
    revision: str = ""
    last_ok: bool = True
    last_attempt: float = 0.0
    last_success: float = 0.0
    errors: list[str] = field(default_factory=list)
    reloads_ok: int = 0
    reloads_failed: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "policy_loaded": self.loaded,
            "policy_revision": self.revision,
            "last_reload_ok": self.last_ok,
            "last_reload_errors": list(self.errors),
            "reloads_ok": self.reloads_ok,
            "reloads_failed": self.reloads_failed,
        }


def snapshot(directory: Path) -> Snapshot:
    """(mtime_ns, size) of every file under the folder; editor swap and hidden files ignored."""
    out: Snapshot = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(("~", ".swp", ".tmp")):
                continue
            path = os.path.join(root, name)
            try:
                st = os.stat(path)
            except FileNotFoundError:  # removed between listing and stat: the next poll sees it
                continue
            out[os.path.relpath(path, directory)] = (st.st_mtime_ns, st.st_size)
    return out


class PolicyStore:
    """Holds the current PolicySet; `current` is one attribute read, so swapping needs no lock."""

    def __init__(
        self,
        directory: str | Path,
        catalog: AgentCatalog,
        *,
        on_change: Callable[[ReloadStatus], None] | None = None,
    ):
        self.directory = Path(directory)
        self.catalog = catalog
        self.current: PolicySet | None = None
        self.status = ReloadStatus()
        self._on_change = on_change
        self._load_lock = threading.Lock()

    def reload(self) -> bool:
        """Load the folder and swap it in; on failure keep the last good set. True when loaded."""
        with self._load_lock:
            self.status.last_attempt = time.time()
            try:
                policies = load_policy_dir(self.directory, catalog=self.catalog)
            except PolicyLoadError as exc:
                self._failed([str(e) for e in exc.errors] or [str(exc)])
                return False
            except Exception as exc:  # a loader bug must not kill the watcher or serve a half set
                log.exception("policy load crashed")
                self._failed([f"{self.directory}: loader failed: {type(exc).__name__}: {exc}"])
                return False
            changed = self.current is None or policies.revision != self.current.revision
            self.current = policies
            st = self.status
            st.loaded, st.revision, st.last_ok, st.errors = True, policies.revision, True, []
            st.last_success = st.last_attempt
            st.reloads_ok += 1
            if changed:
                log.info("policy set %s loaded from %s", policies.revision, self.directory)
        self._notify()
        return True

    def _failed(self, errors: list[str]) -> None:
        st = self.status
        st.last_ok, st.errors = False, errors
        st.reloads_failed += 1
        keeping = f"keeping revision {st.revision}" if st.loaded else "no policy set loaded: not serving"
        log.error("policy reload failed (%d errors), %s:\n%s", len(errors), keeping, "\n".join(errors))
        self._notify()

    def _notify(self) -> None:
        if self._on_change is not None:
            self._on_change(self.status)


class PolicyWatcher:
    """Polls the folder; after a change, waits until it has been still for `debounce` seconds.

    The debounce matters: an editor or `git checkout` writes several files one after another, and
    loading halfway would report errors that are gone a moment later.
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        interval: float = 0.5,
        debounce: float = 0.3,
        seen: Snapshot | None = None,
    ):
        """`seen`: the snapshot taken before the store's first load, so an edit made during that
        load is not missed."""
        self.store = store
        self.interval = interval
        self.debounce = debounce
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-watcher", daemon=True)
        self._seen: Snapshot = seen if seen is not None else snapshot(store.directory)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # keep watching whatever one poll hit (folder gone, permissions)
                log.exception("policy watcher poll failed")

    def poll(self) -> bool:
        """One check; reloads when the folder changed and then settled. True when it reloaded."""
        current = snapshot(self.store.directory)
        if current == self._seen:
            return False
        while not self._stop.is_set():
            if self._stop.wait(self.debounce):
                return False
            settled = snapshot(self.store.directory)
            if settled == current:
                break
            current = settled
        self._seen = current
        self.store.reload()
        return True
