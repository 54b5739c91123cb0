"""Reading the decision log: queries, following new records, verification.

Readers use their own read-only connections (WAL lets them run beside the writer) and fetch in
pages, so a slow consumer never holds a read transaction open: that would stop SQLite from
checkpointing the WAL back into the database and let the WAL grow without bound.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, Unpack

from checkpoint.audit import store
from checkpoint.audit.record import from_row
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import Anchor, VerifyReport, verify_rows

PAGE = 500
# wait(pos, timeout): block until records after `pos` may exist, the follower should stop, or
# `timeout` seconds pass.
Waiter = Callable[[int, float], None]


class DecisionReader:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        return store.open_reader(self.path)

    def read(
        self,
        after_seq: int = 0,
        *,
        limit: int | None = None,
        **filters: Unpack[Filters],
    ) -> Iterator[dict[str, Any]]:
        """Stored records with seq > after_seq, oldest first, JSON fields parsed."""
        conn = self._connect()
        try:
            yield from _paged(conn, after_seq, None, limit, filters)
        finally:
            conn.close()

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]:
        """The last n matching records, oldest first."""
        conn = self._connect()
        try:
            rows = list(store.select(conn, limit=n, newest_first=True, **filters))
        finally:
            conn.close()
        return [from_row(row) for row in reversed(rows)]

    def head(self) -> tuple[int, str] | None:
        conn = self._connect()
        try:
            return store.head(conn)
        finally:
            conn.close()

    def verify(
        self, *, expect_head: tuple[int, str] | None = None, anchors: Iterable[Anchor] = ()
    ) -> VerifyReport:
        conn = self._connect()
        try:
            # One cursor, one read transaction: the whole chain is checked as of one moment.
            return verify_rows(store.select(conn), expect_head=expect_head, anchors=anchors)
        finally:
            conn.close()

    def follow(
        self,
        after_seq: int = 0,
        *,
        stop_event: threading.Event | None = None,
        poll_interval: float = 0.5,
        wait: Waiter | None = None,
        ended: Callable[[], bool] | None = None,
        **filters: Unpack[Filters],
    ) -> Iterator[dict[str, Any]]:
        """Stored records after ``after_seq``, then new ones as they are committed.

        Stops when ``stop_event`` is set (checked at least every ``poll_interval`` seconds) or
        when ``ended()`` turns true, after yielding everything committed by then.
        """
        stop = stop_event or threading.Event()
        if wait is None:

            def wait(_pos: int, timeout: float) -> None:
                stop.wait(timeout)

        conn = self._connect()
        try:
            pos = after_seq
            while not stop.is_set():
                # Asked before catching up, so records committed just before the end are read.
                finished = ended is not None and ended()
                last = store.head(conn)
                if last is not None and last[0] > pos:
                    # Up to the head seen now: records committed meanwhile come next round, so
                    # none is skipped even when filters make most rows invisible.
                    yield from _paged(conn, pos, last[0], None, filters)
                    pos = last[0]
                if finished:
                    return
                wait(pos, poll_interval)
        finally:
            conn.close()


def _paged(
    conn: sqlite3.Connection, after_seq: int, upto_seq: int | None, limit: int | None, filters: Filters
) -> Iterator[dict[str, Any]]:
    pos, remaining = after_seq, limit
    while remaining is None or remaining > 0:
        size = PAGE if remaining is None else min(PAGE, remaining)
        rows = list(store.select(conn, after_seq=pos, upto_seq=upto_seq, limit=size, **filters))
        for row in rows:
            yield from_row(row)
        if len(rows) < size:
            return
        pos = rows[-1]["seq"]
        if remaining is not None:
            remaining -= len(rows)
