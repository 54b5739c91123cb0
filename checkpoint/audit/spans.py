"""Reading the decision log across its sealed segments and the live file, as one log in seq order.

A reader moves by seq position. Up to the manifest's last sealed seq it reads segments (pruned ones
are skipped); after it, the live file. Sealing may move records out of the live file while a reader
pages through it: each page of the live file is read in one transaction together with the live
file's lowest seq, and when that lowest seq is beyond the reader's position the manifest is read
again (a seal lists its segment before it deletes the live records), so the reader goes on in the
new segment and misses nothing. A record the manifest lists as sealed is never read from the live
file, so one left there by a crash is not read twice.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from checkpoint.audit import segments, store
from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.segments import Manifest, Seal

log = logging.getLogger(__name__)

Row = TypeVar("Row")
# fetch(conn, after_seq, upto_seq or None, limit) -> rows in seq order
Fetch = Callable[[sqlite3.Connection, int, "int | None", int], list[Row]]


class Spans:
    """The files of one decision log, opened read-only as they are needed. Not thread-safe: one per
    reader (a query, a follower, a verify)."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = Path(log_path)
        self._segments: dict[int, sqlite3.Connection] = {}
        self.live = store.open_reader(self.log_path)
        try:
            self.manifest = segments.read_manifest(self.log_path)
        except segments.ManifestError as exc:
            # readers cannot tell what is sealed; verify reads the manifest itself and reports it
            self.manifest_error: segments.ManifestError | None = exc
            self.manifest = Manifest()
        else:
            self.manifest_error = None

    def reload(self) -> Manifest:
        self.manifest = segments.read_manifest(self.log_path)
        return self.manifest

    def segment(self, seal: Seal) -> sqlite3.Connection | None:
        """A sealed segment's connection; None when its file is gone (verify says whether it was pruned)."""
        conn = self._segments.get(seal.number)
        if conn is None:
            path = segments.folder(self.log_path) / seal.file
            try:
                conn = store.open_reader(path, immutable=True)
            except FileNotFoundError:
                return None
            self._segments[seal.number] = conn
        return conn

    def close(self) -> None:
        for conn in (self.live, *self._segments.values()):
            with contextlib.suppress(sqlite3.Error):
                conn.close()
        self._segments.clear()

    def __enter__(self) -> Spans:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    def head(self) -> tuple[int, str] | None:
        """The newest record's (seq, hash): the live file's, or the last sealed head when the live
        file holds none (a log whose live file was emptied)."""
        head = store.head(self.live)
        if head is not None:
            return head
        try:
            return self.reload().sealed_head
        except segments.ManifestError as exc:
            raise AuditUnavailable(f"the sealed segments' manifest cannot be read: {exc}") from exc

    def pages(self, after_seq: int, upto_seq: int | None, fetch: Fetch[Row], seq_of: Callable[[Row], int],
              page: int) -> Iterator[list[Row]]:
        """Pages of rows with after_seq < seq <= upto_seq, in seq order, across segments and the
        live file. A page shorter than `page` means its file has no more (not that the log ends).
        Raises AuditUnavailable when the manifest cannot be read: what is sealed is unknown."""
        if self.manifest_error is not None:
            raise AuditUnavailable(f"the sealed segments' manifest cannot be read: {self.manifest_error}")
        pos = after_seq
        manifest = self.manifest
        while upto_seq is None or pos < upto_seq:
            nxt = pos + 1
            if nxt <= manifest.sealed_last:
                seal = manifest.segment_for(nxt)
                if seal is None:  # a hole in the manifest: verify reports it; reading goes on after it
                    later = [s.first_seq for s in manifest.seals if s.first_seq > nxt]
                    pos = min(later) - 1 if later else manifest.sealed_last
                    continue
                hi = seal.last_seq if upto_seq is None else min(seal.last_seq, upto_seq)
                conn = None if manifest.pruned(seal) else self.segment(seal)
                if conn is None:
                    if not manifest.pruned(seal):
                        log.warning("sealed segment %s is missing; its records are skipped", seal.file)
                    pos = hi
                    continue
                rows = fetch(conn, pos, hi, page)
                if rows:
                    yield rows
                pos = seq_of(rows[-1]) if len(rows) == page else hi
                continue
            self.live.execute("BEGIN")
            try:
                low = self.live.execute(f"SELECT min(seq) FROM {store.TABLE}").fetchone()[0]
                if low is not None and low > nxt and self.reload().sealed_last >= nxt:
                    manifest = self.manifest  # sealed meanwhile: read on in the new segment
                    continue
                rows = fetch(self.live, max(pos, manifest.sealed_last), upto_seq, page)
            finally:
                self.live.execute("COMMIT")
            if rows:
                yield rows
            if len(rows) < page:
                return
            pos = seq_of(rows[-1])

    def rows(self, after_seq: int = 0, upto_seq: int | None = None, *, page: int = 500,
             **filters: Any) -> Iterator[dict[str, Any]]:
        """Stored rows (JSON columns as text) matching `filters` (store.Filters), in seq order."""

        def fetch(conn: sqlite3.Connection, after: int, upto: int | None, limit: int) -> list[dict[str, Any]]:
            return list(store.select(conn, after_seq=after, upto_seq=upto, limit=limit, **filters))

        for rows in self.pages(after_seq, upto_seq, fetch, lambda row: row["seq"], page):
            yield from rows

    def newest(self, n: int, **filters: Any) -> list[dict[str, Any]]:
        """The last n matching rows, newest first: the live file's, then back through the segments."""
        try:
            manifest = self.reload()
        except segments.ManifestError as exc:
            raise AuditUnavailable(f"the sealed segments' manifest cannot be read: {exc}") from exc
        found = list(store.select(self.live, after_seq=manifest.sealed_last, limit=n, newest_first=True, **filters))
        for seal in reversed(manifest.present()):
            if len(found) >= n:
                break
            conn = self.segment(seal)
            if conn is not None:
                found += store.select(conn, after_seq=seal.first_seq - 1, upto_seq=seal.last_seq,
                                      limit=n - len(found), newest_first=True, **filters)
        return found[:n]
