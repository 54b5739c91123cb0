"""A lock that holds across threads and across processes on one data folder (`--workers N`).

A store's check-then-write (is this version still pending? then approve it) is safe under a
thread lock only while one process owns the store. Several checkpoint workers share one data
folder, so the acts also take an exclusive `flock` on a lock file beside the store. `flock`
belongs to the open file, which every thread of a process shares, so a thread lock is taken
first and the file lock only by the outermost holder. The kernel drops the file lock when its
process dies (SIGKILL included), so a killed worker never leaves the others locked out.
"""

from __future__ import annotations

import fcntl
import os
import threading
import weakref
from pathlib import Path
from types import TracebackType

from warden.private import FILE_MODE, private_folder


class SharedLock:
    """Reentrant in a thread, exclusive across threads and processes. `path` is the lock file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        private_folder(self.path.parent)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        self._thread_lock = threading.RLock()
        self._depth = 0
        # stores that own a lock have no close of their own: the descriptor goes with the lock
        self._closer = weakref.finalize(self, _close_quietly, self._fd)

    def acquire(self, blocking: bool = True) -> bool:
        """Take the lock; with `blocking=False` only when it is free now (False: not taken)."""
        if not self._thread_lock.acquire(blocking):
            return False
        if self._depth == 0:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._thread_lock.release()
                return False
            except BaseException:
                self._thread_lock.release()
                raise
        self._depth += 1
        return True

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._thread_lock.release()

    def __enter__(self) -> SharedLock:
        self.acquire()
        return self

    def __exit__(self, *_exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.release()

    def close(self) -> None:
        self._closer()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
