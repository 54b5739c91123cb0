"""Re-verify the hash chain of stored records, and say where and why it breaks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from checkpoint.audit.record import GENESIS_HASH, HASHED_FIELDS, record_hash

# Why a chain is broken; stable strings, shown by `warden audit verify` and counted by tests.
GAP = "gap"  # a seq is missing: a record was deleted (or the first one was)
BROKEN_LINK = "broken_link"  # prev_hash is not the hash of the record before
HASH_MISMATCH = "hash_mismatch"  # the record's fields do not hash to its stored hash
TRUNCATED = "truncated"  # fewer records than an anchor recorded elsewhere says there were
HEAD_MISMATCH = "head_mismatch"  # the record at the anchor's seq has another hash
# Retention (checkpoint/audit/segments.py): a sealed segment the manifest lists is gone without a
# prune that says so, its file is not the one sealed, or the manifest itself does not hold.
SEGMENT_MISSING = "segment_missing"
SEGMENT_ALTERED = "segment_altered"
MANIFEST_INVALID = "manifest_invalid"
# An index of the live file does not hold exactly what its table holds: a query that uses it
# (`--run`, `--agent`) would read other records than the chain vouches for.
INDEX_MISMATCH = "index_mismatch"


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    checked: int  # records whose link and hash were checked and held
    head_seq: int  # last good record (0 when none)
    head_hash: str
    broken_seq: int | None = None
    reason: str | None = None
    detail: str = ""
    # the chain was proved from this sealed head on (records up to it were pruned); 0: from seq 1
    start_seq: int = 0
    start_hash: str = GENESIS_HASH
    segments: int = 0  # sealed segments read
    unchecked_anchors: int = 0  # anchors inside pruned segments, which nothing left can check

    def summary(self) -> str:
        if self.ok:
            text = f"ok: {self.checked} records, head seq {self.head_seq} hash {self.head_hash}"
            if self.segments:
                text += f"; {self.segments} sealed segment(s) and the live file"
            if self.start_seq:
                text += (f"; starts at the pruned head seq {self.start_seq} hash {self.start_hash} "
                         "(the records up to it were pruned; its manifest entry is signed)")
            if self.unchecked_anchors:
                text += f"; {self.unchecked_anchors} anchor(s) fall in pruned segments and were not checked"
            return text
        return f"BROKEN at seq {self.broken_seq}: {self.reason}: {self.detail} ({self.checked} records ok before it)"


@dataclass(frozen=True)
class Anchor:
    """A head (seq, hash) recorded outside the log earlier; `label` names it in a report."""

    seq: int
    hash: str
    label: str = "the expected head"


class ChainCheck:
    """Walks a chain fed in seq order, possibly from several files (sealed segments, then the live
    file), each hashing the fields of its own schema; remembers the first problem.

    ``start`` is the head the chain continues from: (0, genesis) for a whole log, or a pruned
    segment's sealed head. Anchors before it cannot be checked (counted, not failed), except one
    at the start itself, which must name its hash."""

    def __init__(self, anchors: Iterable[Anchor] = (), start: tuple[int, str] = (0, GENESIS_HASH)) -> None:
        self.wanted: dict[int, list[Anchor]] = {}
        for anchor in anchors:
            self.wanted.setdefault(anchor.seq, []).append(anchor)
        self.start = start
        self.expected_seq, self.prev = start[0] + 1, start[1]
        self.checked = 0
        self.segments = 0
        self.problem: VerifyReport | None = None
        self.unchecked = sum(len(found) for seq, found in self.wanted.items() if seq < start[0])
        for anchor in self.wanted.get(start[0], ()) if start[0] else ():
            if anchor.hash != start[1]:
                self.fail(start[0], HEAD_MISMATCH, f"the pruned head seq {start[0]} has hash {start[1]}, but "
                          f"{anchor.label} says {anchor.hash}: the log was rewritten at or before it since the anchor")

    @property
    def ok(self) -> bool:
        return self.problem is None

    def fail(self, seq: int, reason: str, detail: str) -> None:
        if self.problem is None:
            self.problem = VerifyReport(False, self.checked, self.expected_seq - 1, self.prev, seq, reason, detail,
                                        self.start[0], self.start[1], self.segments)

    def feed(self, rows: Iterable[Mapping[str, Any]], fields: tuple[str, ...] = HASHED_FIELDS) -> bool:
        """Check rows (in seq order, JSON columns as stored text); False once the chain broke."""
        if self.problem is not None:
            return False
        for row in rows:
            seq = row["seq"]
            if seq != self.expected_seq:
                self.fail(self.expected_seq, GAP,
                          f"seq {self.expected_seq} is missing; the next stored record is seq {seq}")
                return False
            if row["prev_hash"] != self.prev:
                self.fail(seq, BROKEN_LINK, f"prev_hash {row['prev_hash']} is not the hash of seq {seq - 1} ({self.prev})")
                return False
            try:
                computed = record_hash(self.prev, tuple(row[name] for name in fields), fields)
            except (TypeError, ValueError, UnicodeError) as exc:
                self.fail(seq, HASH_MISMATCH, f"fields cannot be hashed: {exc}")
                return False
            if computed != row["hash"]:
                self.fail(seq, HASH_MISMATCH, f"stored hash {row['hash']}, fields hash to {computed}")
                return False
            for anchor in self.wanted.get(seq, ()):
                if anchor.hash != computed:
                    self.fail(seq, HEAD_MISMATCH,
                              f"seq {seq} hashes to {computed}, but {anchor.label} says {anchor.hash}: the log was "
                              "rewritten at or before this record since the anchor")
                    return False
            self.prev = row["hash"]
            self.checked += 1
            self.expected_seq += 1
        return True

    def report(self) -> VerifyReport:
        if self.problem is not None:
            return self.problem
        head = self.expected_seq - 1
        beyond = [anchor for seq, found in self.wanted.items() if seq > head for anchor in found]
        if beyond:
            last = max(beyond, key=lambda a: a.seq)
            self.fail(head + 1, TRUNCATED,
                      f"the log ends at seq {head} but {last.label} says seq {last.seq} had hash {last.hash}: "
                      "records were deleted from the end")
            assert self.problem is not None
            return self.problem
        return VerifyReport(True, self.checked, head, self.prev, start_seq=self.start[0], start_hash=self.start[1],
                            segments=self.segments, unchecked_anchors=self.unchecked)


def verify_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    expect_head: tuple[int, str] | None = None,
    anchors: Iterable[Anchor] = (),
    fields: tuple[str, ...] = HASHED_FIELDS,
) -> VerifyReport:
    """Check rows (in seq order, JSON columns as stored text) from seq 1 onwards.

    ``expect_head`` and ``anchors`` are heads recorded outside the database earlier (signed heads,
    docs/audit.md); they are the only way to notice records deleted from the end, which leave a
    shorter chain that is still whole, and a chain rewritten and rehashed from some record on.
    Every record at an anchor's seq must have the anchor's hash; the log must reach every anchor.
    """
    check = ChainCheck([*anchors, *([Anchor(*expect_head)] if expect_head is not None else [])])
    check.feed(rows, fields)
    return check.report()
