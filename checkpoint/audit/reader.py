"""Reading the decision log: queries, following new records, verification.

Readers use their own read-only connections (WAL lets them run beside the writer) and fetch in
pages, so a slow consumer never holds a read transaction open: that would stop SQLite from
checkpointing the WAL back into the database and let the WAL grow without bound. Every read spans
the sealed segments and the live file (checkpoint/audit/spans.py), as one log in seq order.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from itertools import zip_longest
from pathlib import Path
from typing import Any, Unpack

from checkpoint.audit import segments, store
from checkpoint.audit.record import GENESIS_HASH, from_row
from checkpoint.audit.spans import Spans
from checkpoint.audit.store import Filters
from checkpoint.audit.verify import (
    INDEX_MISMATCH,
    MANIFEST_INVALID,
    SEGMENT_ALTERED,
    SEGMENT_MISSING,
    Anchor,
    ChainCheck,
    VerifyReport,
)

PAGE = 500
# wait(pos, timeout): block until records after `pos` may exist, the follower should stop, or
# `timeout` seconds pass.
Waiter = Callable[[int, float], None]


class DecisionReader:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _spans(self) -> Spans:
        return Spans(self.path)

    def read(
        self,
        after_seq: int = 0,
        *,
        limit: int | None = None,
        **filters: Unpack[Filters],
    ) -> Iterator[dict[str, Any]]:
        """Stored records with seq > after_seq, oldest first, JSON fields parsed."""
        spans = self._spans()
        try:
            yield from _limited(spans.rows(after_seq, page=PAGE if limit is None else min(PAGE, max(limit, 1)),
                                           **filters), limit)
        finally:
            spans.close()

    def tail(self, n: int, **filters: Unpack[Filters]) -> list[dict[str, Any]]:
        """The last n matching records, oldest first."""
        with self._spans() as spans:
            rows = spans.newest(n, **filters)
        return [from_row(row) for row in reversed(rows)]

    def head(self) -> tuple[int, str] | None:
        with self._spans() as spans:
            return spans.head()

    def verify(
        self,
        *,
        expect_head: tuple[int, str] | None = None,
        anchors: Iterable[Anchor] = (),
        public_key: Any = None,
    ) -> VerifyReport:
        """The whole chain: sealed segments (each file as sealed, each seal line signed), then the
        live file. `public_key`: the head-signing key to check seal lines with (default: the data
        folder's)."""
        anchors = [*anchors, *([Anchor(*expect_head)] if expect_head is not None else [])]
        with self._spans() as spans:
            live = spans.live
            # The live file's snapshot first, the manifest after: a seal that deleted records from
            # the live file since is already in the manifest read next, so nothing falls between.
            live.execute("BEGIN")
            try:
                live.execute(f"SELECT min(seq) FROM {store.TABLE}").fetchone()
                try:
                    manifest = spans.reload()
                except segments.ManifestError as exc:
                    return VerifyReport(False, 0, 0, GENESIS_HASH, 1, MANIFEST_INVALID, str(exc))
                problem = _manifest_problem(self.path, manifest, public_key)
                if problem is not None:
                    return problem
                anchors += [Anchor(s.kept_seq, s.kept_hash, f"the live head signed when segment {s.number} was "
                                   f"sealed ({s.sealed_at})") for s in manifest.seals if s.kept_seq > manifest.start[0]]
                check = ChainCheck(anchors, manifest.start)
                for seal in manifest.present():
                    _verify_segment(spans, seal, check)
                    if not check.ok:
                        return check.report()
                fields = store.hashed_fields(store.schema_of(live))
                if check.feed(store.select(live, after_seq=manifest.sealed_last), fields):
                    _verify_indexes(live, check)
                return check.report()
            finally:
                live.execute("COMMIT")

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

        spans = self._spans()
        try:
            pos = after_seq
            while not stop.is_set():
                # Asked before catching up, so records committed just before the end are read.
                finished = ended is not None and ended()
                last = spans.head()
                if last is not None and last[0] > pos:
                    # Up to the head seen now: records committed meanwhile come next round, so
                    # none is skipped even when filters make most rows invisible.
                    for row in spans.rows(pos, last[0], page=PAGE, **filters):
                        yield from_row(row)
                    pos = last[0]
                if finished:
                    return
                wait(pos, poll_interval)
        finally:
            spans.close()


def _limited(rows: Iterator[dict[str, Any]], limit: int | None) -> Iterator[dict[str, Any]]:
    if limit is not None and limit <= 0:
        return
    for count, row in enumerate(rows, 1):
        yield from_row(row)
        if limit is not None and count >= limit:
            return


def _manifest_problem(log_path: Path, manifest: segments.Manifest, public_key: Any) -> VerifyReport | None:
    def bad(seq: int, detail: str) -> VerifyReport:
        return VerifyReport(False, 0, 0, GENESIS_HASH, seq, MANIFEST_INVALID, detail)

    if not manifest.entries:
        return None
    from checkpoint.audit import heads

    if public_key is None:
        try:
            public_key = heads.load_public_key(heads.key_path(log_path))
        except (OSError, ValueError) as exc:
            return bad(1, f"the manifest's lines are signed, and there is no key to check them with ({exc})")
    public_id = heads.key_id(public_key)
    for number, entry in enumerate(manifest.entries, 1):
        if not segments.verifies(entry, public_key, public_id):
            what = f"{entry.kind} of segment {entry.number}"
            return bad(1, f"manifest line {number} ({what}) is not signed by key {public_id}: the manifest was "
                       "altered, or another key signed it")
    before = (0, GENESIS_HASH, 0)
    for seal in manifest.seals:
        if (seal.number, seal.first_seq, seal.first_prev_hash) != (before[2] + 1, before[0] + 1, before[1]) \
                or seal.last_seq < seal.first_seq or seal.records != seal.last_seq - seal.first_seq + 1:
            return bad(seal.first_seq, f"seal of segment {seal.number} (seqs {seal.first_seq}..{seal.last_seq}) does "
                       f"not continue the one before (which ends at seq {before[0]}): a seal line is missing")
        before = (seal.last_seq, seal.last_hash, seal.number)
    sealed = {seal.number for seal in manifest.seals}
    pruned_run = True
    for seal in manifest.seals:
        pruned_run = pruned_run and manifest.pruned(seal)
        if manifest.pruned(seal) and not pruned_run:
            return bad(seal.first_seq, f"segment {seal.number} was pruned but an older one was not: only the oldest "
                       "segments are ever pruned")
    unknown = sorted(set(manifest.prunes) - sealed)
    if unknown:
        return bad(1, f"the manifest prunes segment(s) {unknown} it never sealed")
    return None


def _verify_indexes(conn: sqlite3.Connection, check: ChainCheck) -> None:
    """Every index of the live file holds exactly its table's values. Queries by an indexed column
    (`--run`, `--agent`, a new index's column) read the index, not the table the chain was walked
    in: an index edited in the file (an entry dropped, or pointing at another record) would hide a
    record from them, or show one under another run, while the chain still holds. A sealed segment
    needs no such check: its file is the one sealed (sha256), and sealing builds its indexes anew."""
    table = store.TABLE
    for _, name, _unique, _origin, partial in conn.execute(f"PRAGMA index_list({table})").fetchall():
        info = conn.execute("SELECT cid, name FROM pragma_index_xinfo(?) WHERE key = 1 ORDER BY seqno",
                            (name,)).fetchall()
        if partial or not info or any(cid < 0 for cid, _ in info):
            check.fail(check.expected_seq, INDEX_MISMATCH,
                       f"the live file has an index {name!r} that is partial or on an expression: warden makes none")
            return
        columns = ", ".join(f'"{column}"' for _, column in info)
        quoted = name.replace('"', '""')
        by_index = conn.execute(f'SELECT seq, {columns} FROM {table} INDEXED BY "{quoted}" ORDER BY seq')
        by_table = conn.execute(f"SELECT seq, {columns} FROM {table} NOT INDEXED ORDER BY seq")
        for held, stored in zip_longest(by_index, by_table):
            if held != stored:
                seq = min(row[0] for row in (held, stored) if row is not None)
                # seqs only, never the values: the web view shows this detail to every tenant's auditor
                check.fail(seq, INDEX_MISMATCH,
                           f"index {name!r} of the live file does not hold what its table holds for seq {seq}: the "
                           f"file was edited; a query by {', '.join(c for _, c in info)} would not read the records "
                           "the chain vouches for")
                return


def _verify_segment(spans: Spans, seal: segments.Seal, check: ChainCheck) -> None:
    from checkpoint.audit.rotate import file_sha256

    path = segments.folder(spans.log_path) / seal.file
    conn = spans.segment(seal)
    if conn is None:
        check.fail(seal.first_seq, SEGMENT_MISSING,
                   f"{path} (seqs {seal.first_seq}..{seal.last_seq}) is sealed in the manifest but its file is gone, "
                   "and no prune says so: records were deleted")
        return
    try:
        fields = store.hashed_fields(store.schema_of(conn))
    except Exception as exc:  # noqa: BLE001 - a file that is no warden log at all
        check.fail(seal.first_seq, SEGMENT_ALTERED, f"{path} cannot be read as a segment: {exc}")
        return
    if not check.feed(store.select(conn, upto_seq=seal.last_seq), fields):
        return
    if (check.expected_seq - 1, check.prev) != (seal.last_seq, seal.last_hash):
        check.fail(check.expected_seq, SEGMENT_ALTERED,
                   f"{path} ends at seq {check.expected_seq - 1}, but its seal says seq {seal.last_seq} with hash "
                   f"{seal.last_hash}: records were deleted from it")
        return
    digest = file_sha256(path)
    if digest != seal.sha256:
        check.fail(seal.first_seq, SEGMENT_ALTERED,
                   f"{path} has sha256 {digest}, sealed as {seal.sha256}: the file was changed after it was sealed")
        return
    check.segments += 1
