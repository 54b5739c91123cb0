"""The policy set in force, and the watcher that swaps in a new one once an edit has settled.

A reload is all or nothing: the new folder is loaded completely (`load_policy_dir` parses,
validates and compiles everything) before the reference is swapped, so a request sees either the
old set or the new one, never a mix. A broken edit keeps the last good set serving; its errors
are logged, counted and shown in health.

Only a settled edit is loaded. An editor, a script or `git checkout` may write a file in several
steps, and a first step can be valid YAML that says less than the whole edit (an off-limits entry
not written yet). So the watcher (file events from `watchfiles`: inotify on Linux, a polling
fallback where events do not reach) waits until the files have stopped changing for `settle`
seconds, and the store loads only when the folder's content fingerprint is the same before and
after the load; when it is not, the folder is still being written and nothing is swapped.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import watchfiles

from checkpoint.policy import AgentCatalog, PolicyLoadError, PolicySet, load_policy_dir
from checkpoint.policy.learning_index import LearningIndex
from checkpoint.policy.loader import MANIFEST
from warden.policyfiles import policy_files

log = logging.getLogger("warden.checkpoint.reload")

DEFAULT_SETTLE = 1.0  # seconds without a change before an edit is loaded
DEFAULT_RECHECK = 5.0  # seconds between content checks when no event comes
TICK = 1.0  # seconds: the watches wake at least this often (a look at the link, a new watch known set up)


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


def fingerprint(directory: Path) -> str:
    """sha256 of the policy files' names and contents (what the loader reads); "" when the
    folder cannot be listed. A file that cannot be read (a symlink whose target is gone) adds a
    mark instead of its bytes: an edit that leaves it so settles and fails to load, and is
    reported, rather than looking like a folder still being written forever; a file removed
    between listing and reading is listed no more in the next fingerprint, which then differs."""
    digest = hashlib.sha256()
    try:
        paths = policy_files(directory)
    except OSError:
        return ""
    for path in paths:
        try:
            data = path.read_bytes() if path.is_file() else b"\0not a regular file"
        except OSError as exc:
            data = f"\0unreadable: {exc.errno}".encode()
        digest.update(str(path.relative_to(directory)).encode() + b"\0" + data + b"\0")
    try:  # the manifest decides whether the set is whole: a change to it is a change to the set
        digest.update(b"\0manifest\0" + (directory / MANIFEST).read_bytes())
    except OSError:
        pass
    return digest.hexdigest()


class PolicyStore:
    """Holds the current PolicySet; `current` is one attribute read, so swapping needs no lock."""

    def __init__(
        self,
        directory: str | Path,
        catalog: AgentCatalog,
        *,
        on_change: Callable[[ReloadStatus], None] | None = None,
        learnings: Callable[[PolicySet], LearningIndex] | None = None,
    ):
        self.directory = Path(directory)
        self.catalog = catalog
        # compiles the active learnings for a policy set (docs/learnings.md); None: no learnings
        self.learnings = learnings
        self.current: PolicySet | None = None
        self.status = ReloadStatus()
        self._on_change = on_change
        self._load_lock = threading.Lock()
        self.fingerprint = ""  # of the folder at the last settled load, good or broken
        # told what a load changed in the agent catalog (a file edit applied or proposed), to record it
        self.on_catalog: Callable[[PolicySet], None] | None = None

    def reload(self) -> bool:
        """Load the folder and swap it in; on failure keep the last good set. True when loaded.

        When the folder's content changed during the load, nothing is swapped and nothing is
        reported: the edit has not settled, and the watcher sees it again once it has.
        """
        with self._load_lock:
            self.status.last_attempt = time.time()
            before = fingerprint(self.directory)
            problem: list[str] | None = None
            try:
                policies = load_policy_dir(self.directory, catalog=self.catalog)
            except PolicyLoadError as exc:
                problem = [str(e) for e in exc.errors] or [str(exc)]
            except Exception as exc:  # a loader bug must not kill the watcher or serve a half set
                log.exception("policy load crashed")
                problem = [f"{self.directory}: loader failed: {type(exc).__name__}: {exc}"]
            if not before or fingerprint(self.directory) != before:
                log.info("policy folder %s changed while it was loaded; waiting for it to settle", self.directory)
                return False
            self.fingerprint = before
            if problem is not None:
                self._failed(problem)
                return False
            changed = self.current is None or policies.revision != self.current.revision
            self.current = self._advised(policies)
            if policies.catalog_changes and self.on_catalog is not None:
                self.on_catalog(policies)
            st = self.status
            st.loaded, st.revision, st.last_ok, st.errors = True, policies.revision, True, []
            st.last_success = st.last_attempt
            st.reloads_ok += 1
            if changed:
                log.info("policy set %s loaded from %s", policies.revision, self.directory)
        self._notify()
        return True

    def refresh(self, *, strict: bool = False) -> None:
        """After a catalog act: the same files, with the live and retired versions as they are now.
        `strict`: learnings that cannot be read raise too, instead of the ones in force staying (a
        replica following a shared store must know it did not catch up: catalog_feed.py)."""
        with self._load_lock:
            if self.current is not None:
                self.current = self._advised(self.current.refreshed(), strict=strict)

    def _advised(self, policies: PolicySet, *, strict: bool = False) -> PolicySet:
        """`policies` with the active learnings compiled now; when they cannot be read, the ones
        in force stay (a learning only ever narrows: losing one silently would widen)."""
        if self.learnings is None:
            return policies
        try:
            return policies.with_learnings(self.learnings(policies))
        except Exception:
            if strict:
                raise
            log.exception("the active learnings could not be read; keeping the ones in force")
            kept = self.current.learnings if self.current is not None else policies.learnings
            return policies.with_learnings(kept)

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
    """Loads the folder once its files have stopped changing for `settle` seconds.

    File events wake it (`watchfiles`; `force_polling=True` polls instead, for filesystems whose
    changes raise no events). Every `recheck` seconds without an event it also compares the
    folder's fingerprint with the last load's, which catches an edit made while the watcher
    started or one whose events never came; such an edit is loaded after `settle` seconds in
    which the fingerprint did not change.

    The folder's own name is watched too, in its parent: `warden policy apply` switches a link
    there (or a deploy renames a new folder into place), which raises no event inside the folder
    watched so far. A switch is loaded at once, without the settle wait (what a link is switched to
    is complete by construction, and its manifest says so), and the folder it now names is watched
    from then on.
    """

    def __init__(
        self,
        store: PolicyStore,
        *,
        settle: float = DEFAULT_SETTLE,
        recheck: float = DEFAULT_RECHECK,
        force_polling: bool | None = None,
    ):
        self.store = store
        self.settle = settle
        self.recheck = recheck
        self.force_polling = force_polling
        self._stop = threading.Event()
        self._switched = threading.Event()  # the name now points elsewhere: watch the new folder
        self._rewatched = threading.Event()  # the folder watch is set up on the folder the name points at
        self.watching = threading.Event()  # both watches are set up (tests wait for it)
        self._thread = threading.Thread(target=self._run, name="policy-watcher", daemon=True)
        self._link_thread = threading.Thread(target=self._run_link, name="policy-link-watcher", daemon=True)
        self._folder_ready = threading.Event()
        self._link_ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self._link_thread.start()

    def stop(self) -> None:
        self._stop.set()
        for thread in (self._thread, self._link_thread):
            if thread.is_alive():
                thread.join(timeout=5)

    def _ready(self, which: threading.Event) -> None:
        which.set()
        if self._folder_ready.is_set() and self._link_ready.is_set():
            self.watching.set()

    def _run(self) -> None:
        step_ms = max(int(self.settle * 1000), 1)
        either = _Either(self._stop, self._switched)
        # the watch yields at least this often, so a new watch is known to be set up within it; the
        # fingerprint is still compared only every `recheck` seconds
        tick = min(self.recheck, TICK)
        while not self._stop.is_set():
            self._switched.clear()
            rechecked = time.monotonic()
            try:
                for changes in watchfiles.watch(
                    self.store.directory,
                    watch_filter=_policy_events(self.store.directory),
                    step=step_ms,  # yield once no change came for `settle` seconds ...
                    debounce=max(step_ms * 60, 60_000),  # ... or a writer has gone on this long
                    rust_timeout=max(int(tick * 1000), 1),
                    yield_on_timeout=True,
                    stop_event=either,
                    force_polling=self.force_polling,
                    raise_interrupt=False,
                ):
                    self._rewatched.set()
                    self._ready(self._folder_ready)
                    if changes:
                        self.check(settled=True)
                    elif time.monotonic() - rechecked >= self.recheck:
                        rechecked = time.monotonic()
                        self.check(settled=False)
            except Exception:  # keep watching whatever one round hit (folder gone, permissions)
                log.exception("policy watcher failed; watching again")
                self._stop.wait(self.settle)

    def _run_link(self) -> None:
        """Watch the folder's name in its parent (not recursively: the parent may be large)."""
        name = self.store.directory.absolute()
        parent = name.parent
        last = _target(name)
        while not self._stop.is_set():
            try:
                for _changes in watchfiles.watch(
                    parent,
                    watch_filter=lambda _c, path: Path(path).name == name.name,
                    recursive=False,
                    step=20,
                    rust_timeout=max(int(min(self.recheck, TICK) * 1000), 1),
                    yield_on_timeout=True,  # and a look at the name every TICK: events may not come
                    stop_event=self._stop,
                    force_polling=self.force_polling,
                    raise_interrupt=False,
                ):
                    self._ready(self._link_ready)
                    now = _target(name)
                    if now == last:
                        continue
                    last = now
                    log.info("policy folder %s now names %s; loading it", name, now[0] or "another folder")
                    # the folder watch follows the name first, so an edit in the new folder made
                    # right after this load is seen by it
                    self._rewatched.clear()
                    self._switched.set()
                    self._rewatched.wait(max(4 * TICK, 4 * self.settle))
                    self.check(settled=True)
            except Exception:
                log.exception("policy link watcher failed; watching again")
                self._stop.wait(self.settle)

    def check(self, *, settled: bool) -> bool:
        """Load the folder when its content differs from the last load's. `settled`: events
        already showed `settle` quiet seconds; otherwise the fingerprint must hold that long.
        True when a new set was loaded."""
        current = fingerprint(self.store.directory)
        if current == self.store.fingerprint:
            return False
        if not settled and (self._stop.wait(self.settle) or fingerprint(self.store.directory) != current):
            return False  # still changing: its events, or the next recheck, come back to it
        return self.store.reload()


class _Either:
    """A stop event for watchfiles that is set when either of two events is."""

    def __init__(self, a: threading.Event, b: threading.Event) -> None:
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()


def _target(path: Path) -> tuple[str, int, int]:
    """What the folder's name points at now: the link's text and the folder's identity."""
    try:
        text = os.readlink(path) if path.is_symlink() else ""
        st = path.stat()
        return text, st.st_dev, st.st_ino
    except OSError:
        return "", 0, 0


def _policy_events(directory: Path) -> Callable[[watchfiles.Change, str], bool]:
    """Events worth waking for: anything but hidden files and folders under the policy folder (an
    edit being written before its `mv`) and editor swap files. Folders count: removing one
    removes files."""
    root = directory.resolve()

    def wanted(_change: watchfiles.Change, path: str) -> bool:
        p = Path(path)
        try:
            parts = p.resolve().relative_to(root).parts
        except ValueError:
            parts = (p.name,)
        return not any(part.startswith(".") for part in parts) and not p.name.endswith(("~", ".swp", ".tmp"))

    return wanted
