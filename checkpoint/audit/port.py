"""What the checkpoint and the audit commands need of a decision log, whatever holds it.

Two implementations stand behind these protocols: the SQLite log of one machine
(log.DecisionLog, reader.DecisionReader) and the PostgreSQL log a fleet shares
(pg_log.PgDecisionLog, pg_reader.PgDecisionReader). Both store the same columns and hash them the
same way (record.py), so `verify` and every filter mean the same on either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol, Unpack

from checkpoint.audit.record import DecisionRecord
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import Anchor, VerifyReport


class DecisionLogReader(Protocol):
    """Reading a log: by filters, its last records, its head, its chain."""

    def read(self, after_seq: int = 0, *, limit: int | None = None,
             **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]: ...

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]: ...

    def head(self) -> tuple[int, str] | None: ...

    def verify(self, *, expect_head: tuple[int, str] | None = None, anchors: Iterable[Anchor] = (),
               public_key: Any = None) -> VerifyReport: ...

    def follow(self, after_seq: int = 0, *, stop_event: threading.Event | None = None, poll_interval: float = 0.5,
               **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]: ...


class DecisionLogStore(Protocol):
    """The checkpoint's log: `append` returns only once the record is committed in the chain, and
    raises AuditUnavailable otherwise, so the caller answers only what is recorded."""

    path: Path  # the local file the log is known by: signed heads and their key live beside it

    def append(self, record: DecisionRecord | Mapping[str, Any], *, timeout: float | None = None) -> int: ...

    @property
    def writable(self) -> bool: ...

    def on_writable(self, callback: Callable[[bool], None]) -> None: ...

    @property
    def closed(self) -> bool: ...

    def stats(self) -> dict[str, int]: ...

    def close(self, timeout: float | None = 30.0) -> None: ...

    def head(self) -> tuple[int, str]: ...

    def read(self, after_seq: int = 0, *, limit: int | None = None,
             **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]: ...

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]: ...

    def verify(self, *, expect_head: tuple[int, str] | None = None, anchors: Iterable[Anchor] = (),
               public_key: Any = None) -> VerifyReport: ...

    def follow(self, after_seq: int = 0, *, stop_event: threading.Event | None = None, poll_interval: float = 0.5,
               **filters: Unpack[Filters]) -> Iterator[dict[str, Any]]: ...

    def wake_followers(self) -> None: ...
