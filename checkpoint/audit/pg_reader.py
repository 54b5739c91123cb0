"""Reading the decision log on PostgreSQL: queries, the last records, following, verification.

Every read pages by seq (PAGE rows a statement), so no statement outlives the store's statement
timeout however large the log, and a slow consumer holds no transaction open. `verify` reads its
pages inside one REPEATABLE READ transaction: one snapshot of the whole chain, whatever the
replicas append meanwhile. A database that cannot be reached is `AuditUnavailable`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Unpack

import psycopg

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.pg_query import HEAD_SQL, select_sql
from checkpoint.audit.pg_schema import TABLE
from checkpoint.audit.record import COLUMNS, GENESIS_HASH, from_row
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import MANIFEST_INVALID, Anchor, ChainCheck, VerifyReport
from warden.store.errors import StoreError
from warden.store.pg import Database

PAGE = 500
STATS_PAGE = 5000
# only the columns the fold reads; `arguments` only of an end (stats.py)
STATS_SQL = (f"SELECT seq, tenant, run_id, agent, agent_version, action, verdict, code, "
             f"CASE WHEN action = 'end' THEN arguments END FROM {TABLE} WHERE seq > %s ORDER BY seq LIMIT %s")
Waiter = Callable[[int, float], None]


@contextmanager
def reading(what: str) -> Iterator[None]:
    """The store's failures (down, timeout, pool full) and a query the database refuses, as
    AuditUnavailable: a reader of the log sees one error whatever the backend."""
    try:
        yield
    except StoreError as exc:
        raise AuditUnavailable(f"decision log: {what}: {exc}") from None
    except psycopg.Error as exc:
        raise AuditUnavailable(f"decision log: {what}: {str(exc).strip().splitlines()[0]}") from None


class PgDecisionReader:
    """The decision log in the PostgreSQL store `db` (migrated: warden store migrate)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def _fetch(self, what: str, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """The rows of one statement. A connection the database dropped since it was pooled (a
        restart) is tried once more on a fresh one: a read changes nothing, and the first read after
        the database came back would fail otherwise. Any other failure is AuditUnavailable at once."""
        with reading(what):
            for attempt in range(2):
                broken = False
                try:
                    with self.db.connection() as conn:
                        try:
                            return conn.execute(sql.encode(), params).fetchall()
                        except psycopg.OperationalError:
                            broken = conn.broken
                            raise
                except StoreError:
                    if not broken or attempt:
                        raise
        raise AssertionError("unreachable")

    def _page(self, after_seq: int, upto_seq: int | None, limit: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]:
        sql, params = select_sql(after_seq=after_seq, upto_seq=upto_seq, limit=limit, **filters)
        rows = self._fetch("read", sql, params)
        return [dict(zip(COLUMNS, row, strict=True)) for row in rows]

    def rows(self, after_seq: int = 0, upto_seq: int | None = None, **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]:
        """Stored rows (JSON columns as text) with after_seq < seq <= upto_seq, in pages."""
        pos = after_seq
        while True:
            page = self._page(pos, upto_seq, PAGE, **filters)
            yield from page
            if len(page) < PAGE:
                return
            pos = page[-1]["seq"]

    def read(self, after_seq: int = 0, *, limit: int | None = None, **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]:
        """Stored records with seq > after_seq, oldest first, JSON fields parsed."""
        if limit is not None and limit <= 0:
            return
        for count, row in enumerate(self.rows(after_seq, **filters), 1):
            yield from_row(row)
            if limit is not None and count >= limit:
                return

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]:
        """The last n matching records, oldest first."""
        if n <= 0:
            return []
        sql, params = select_sql(limit=n, newest_first=True, **filters)
        rows = self._fetch("tail", sql, params)
        return [from_row(dict(zip(COLUMNS, row, strict=True))) for row in reversed(rows)]

    def stats_rows(self, after_seq: int) -> Iterator[tuple[Any, ...]]:
        """The columns the per-version statistics fold (stats.Row) of every record after `after_seq`."""
        pos = after_seq
        while True:
            page = self._fetch("statistics", STATS_SQL, [pos, STATS_PAGE])
            yield from page
            if len(page) < STATS_PAGE:
                return
            pos = page[-1][0]

    def head(self) -> tuple[int, str] | None:
        rows = self._fetch("head", HEAD_SQL, [])
        return (int(rows[0][0]), rows[0][1]) if rows else None

    def verify(
        self,
        *,
        expect_head: tuple[int, str] | None = None,
        anchors: Iterable[Anchor] = (),
        public_key: Any = None,
    ) -> VerifyReport:
        """The whole chain, in one snapshot: from seq 1, or, once partitions were pruned, from the
        last pruned partition's signed seal (pg_retention.py; `public_key` checks the seals).
        Anchors (signed heads kept elsewhere) catch records deleted from the end or a tail
        rewritten and rehashed; each sealed partition's seal is one more."""
        from checkpoint.audit.pg_retention import verify_start

        anchors = [*anchors, *([Anchor(*expect_head)] if expect_head is not None else [])]
        sql, _ = select_sql(after_seq=0, limit=PAGE)
        with reading("verify"), self.db.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            start, sealed, problem = verify_start(conn, public_key)
            if problem is not None:
                return VerifyReport(False, 0, start[0], start[1], start[0] + 1, MANIFEST_INVALID, problem)
            check = ChainCheck([*anchors, *sealed], start)
            pos = start[0]
            while True:
                rows = conn.execute(sql.encode(), [pos, PAGE]).fetchall()
                if not check.feed(dict(zip(COLUMNS, row, strict=True)) for row in rows):
                    break
                if len(rows) < PAGE:
                    break
                pos = rows[-1][0]
        return check.report()

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
        """Stored records after `after_seq`, then new ones as any replica commits them (read every
        `poll_interval`, or as soon as `wait` returns). Ends when `stop_event` is set or `ended()`
        turns true, after yielding everything committed by then."""
        stop = stop_event or threading.Event()
        if wait is None:

            def wait(_pos: int, timeout: float) -> None:
                stop.wait(timeout)

        pos = after_seq
        while not stop.is_set():
            finished = ended is not None and ended()
            last = self.head()
            if last is not None and last[0] > pos:
                # up to the head seen now: a record committed meanwhile comes next round, none skipped
                for row in self.rows(pos, last[0], **filters):
                    yield from_row(row)
                pos = last[0]
            if finished:
                return
            wait(pos, poll_interval)


class PgSpans:
    """The reading face the auditor's web view uses (spans.Spans: head, newest, rows), over the
    PostgreSQL log. Holds nothing open: each call takes a pooled connection and gives it back."""

    def __init__(self, reader: PgDecisionReader) -> None:
        self._reader = reader

    def __enter__(self) -> PgSpans:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        pass

    def head(self) -> tuple[int, str] | None:
        return self._reader.head()

    def rows(self, after_seq: int = 0, upto_seq: int | None = None, *, page: int = PAGE,  # noqa: ARG002
             **filters: Any) -> Iterator[dict[str, Any]]:
        """Stored rows matching `filters`, in seq order (pages of PAGE whatever `page` asks)."""
        return self._reader.rows(after_seq, upto_seq, **filters)

    def newest(self, n: int, **filters: Any) -> list[dict[str, Any]]:
        """The last n matching rows, newest first (JSON columns as text)."""
        sql, params = select_sql(limit=n, newest_first=True, **filters)
        return [dict(zip(COLUMNS, row, strict=True)) for row in self._reader._fetch("newest", sql, params)]


def empty_head(head: tuple[int, str] | None) -> tuple[int, str]:
    return head or (0, GENESIS_HASH)
