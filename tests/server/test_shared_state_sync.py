"""SharedStateWatch.sync, asked by every handler thread before each decision (`--workers N`): it
reads without its lock when nothing moved, and when another process committed, exactly one thread
refreshes and no thread returns before that refresh is done."""

from __future__ import annotations

import sqlite3
import threading
import time

from checkpoint.server.shared_state import SharedStateWatch


def _store(path):
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE acts (n INTEGER)")
    return conn


def test_many_threads_see_a_commit_refresh_once_and_none_decides_before_it(tmp_path):
    catalog, learnings = _store(tmp_path / "catalog.db"), _store(tmp_path / "learnings.db")
    refreshed: list[float] = []
    done = threading.Event()

    def refresh() -> None:
        time.sleep(0.2)  # a slow reload: the other threads must wait for it, not pass it
        refreshed.append(time.monotonic())
        done.set()

    watch = SharedStateWatch([tmp_path / "catalog.db", tmp_path / "learnings.db"], refresh)
    for _ in range(200):
        watch.sync()
    assert refreshed == []  # nothing moved: nothing refreshed

    learnings.execute("INSERT INTO acts VALUES (1)")  # another worker's act, committed
    returned: list[float] = []
    lock = threading.Lock()

    def decide() -> None:
        watch.sync()
        with lock:
            returned.append(time.monotonic())

    threads = [threading.Thread(target=decide) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(refreshed) == 1, refreshed
    assert len(returned) == 16 and min(returned) >= refreshed[0]
    catalog.execute("INSERT INTO acts VALUES (2)")
    watch.sync()
    assert len(refreshed) == 2
    watch.close()


def test_a_failed_refresh_is_tried_again_by_the_next_request(tmp_path):
    store = _store(tmp_path / "catalog.db")
    calls: list[int] = []

    def refresh() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("policy folder unreadable for a moment")

    watch = SharedStateWatch([tmp_path / "catalog.db"], refresh)
    store.execute("INSERT INTO acts VALUES (1)")
    try:
        watch.sync()
        raise AssertionError("the refresh failure was swallowed")
    except RuntimeError:
        pass
    watch.sync()
    watch.sync()
    assert len(calls) == 2
    watch.close()
