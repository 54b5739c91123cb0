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


@dataclass(frozen=True)
class VerifyReport:
    ok: bool
    checked: int  # records whose link and hash were checked and held
    head_seq: int  # last good record (0 when none)
    head_hash: str
    broken_seq: int | None = None
    reason: str | None = None
    detail: str = ""

    def summary(self) -> str:
        if self.ok:
            return f"ok: {self.checked} records, head seq {self.head_seq} hash {self.head_hash}"
        return f"BROKEN at seq {self.broken_seq}: {self.reason}: {self.detail} ({self.checked} records ok before it)"


@dataclass(frozen=True)
class Anchor:
    """A head (seq, hash) recorded outside the log earlier; `label` names it in a report."""

    seq: int
    hash: str
    label: str = "the expected head"


def verify_rows(
    rows: Iterable[Mapping[str, Any]],
    *,
    expect_head: tuple[int, str] | None = None,
    anchors: Iterable[Anchor] = (),
) -> VerifyReport:
    """Check rows (in seq order, JSON columns as stored text) from seq 1 onwards.

    ``expect_head`` and ``anchors`` are heads recorded outside the database earlier (signed heads,
    docs/audit.md); they are the only way to notice records deleted from the end, which leave a
    shorter chain that is still whole, and a chain rewritten and rehashed from some record on.
    Every record at an anchor's seq must have the anchor's hash; the log must reach every anchor.
    """
    wanted: dict[int, list[Anchor]] = {}
    for anchor in [*anchors, *([Anchor(*expect_head)] if expect_head is not None else [])]:
        wanted.setdefault(anchor.seq, []).append(anchor)
    expected_seq, prev, checked = 1, GENESIS_HASH, 0

    def broken(seq: int, reason: str, detail: str) -> VerifyReport:
        return VerifyReport(False, checked, expected_seq - 1, prev, seq, reason, detail)

    for row in rows:
        seq = row["seq"]
        if seq != expected_seq:
            return broken(
                expected_seq, GAP, f"seq {expected_seq} is missing; the next stored record is seq {seq}"
            )
        if row["prev_hash"] != prev:
            return broken(
                seq, BROKEN_LINK, f"prev_hash {row['prev_hash']} is not the hash of seq {seq - 1} ({prev})"
            )
        try:
            computed = record_hash(prev, tuple(row[name] for name in HASHED_FIELDS))
        except (TypeError, ValueError, UnicodeError) as exc:
            return broken(seq, HASH_MISMATCH, f"fields cannot be hashed: {exc}")
        if computed != row["hash"]:
            return broken(seq, HASH_MISMATCH, f"stored hash {row['hash']}, fields hash to {computed}")
        for anchor in wanted.get(seq, ()):
            if anchor.hash != computed:
                return broken(
                    seq,
                    HEAD_MISMATCH,
                    f"seq {seq} hashes to {computed}, but {anchor.label} says {anchor.hash}: the log was "
                    "rewritten at or before this record since the anchor",
                )
        prev = row["hash"]
        checked += 1
        expected_seq += 1

    beyond = [anchor for seq, found in wanted.items() if seq > checked for anchor in found]
    if beyond:
        last = max(beyond, key=lambda a: a.seq)
        return broken(
            checked + 1,
            TRUNCATED,
            f"the log ends at seq {checked} but {last.label} says seq {last.seq} had hash {last.hash}: "
            "records were deleted from the end",
        )
    return VerifyReport(True, checked, checked, prev)
