"""The recorded decisions a replay reads: from a data folder, a decision log file, or a JSONL export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class ReplaySourceError(Exception):
    """The recorded decisions cannot be read (no log, another schema, not JSON lines)."""


def read_records(source: Path) -> Iterator[dict[str, Any]]:
    """Records from a data folder (its decisions.db), a decision log file, or a JSONL export."""
    path, is_log = _located(source)
    if is_log:
        yield from _read_log(path)
    else:
        yield from _read_jsonl(path)


def read_facts(source: Path) -> Iterator[dict[str, Any]]:
    """The records a replay learns runs' modes and approvals from (start_run, REQUIRE_APPROVAL):
    from a log, only those are read; from an export, every line."""
    path, is_log = _located(source)
    if is_log:
        yield from _read_log(path, action="start_run")
        yield from _read_log(path, verdict="REQUIRE_APPROVAL")
    else:
        yield from _read_jsonl(path)


def _located(source: Path) -> tuple[Path, bool]:
    """The file the records are in, and whether it is a decision log (SQLite) or else an export."""
    path = source / "decisions.db" if source.is_dir() else source
    if not path.is_file():
        raise ReplaySourceError(f"no decision log or export at {path}")
    with path.open("rb") as f:
        magic = f.read(16)
    return path, magic == b"SQLite format 3\x00"


def _read_log(path: Path, **filters: Any) -> Iterator[dict[str, Any]]:
    from checkpoint.audit.errors import AuditUnavailable
    from checkpoint.audit.reader import DecisionReader

    try:  # across the log's sealed segments too
        yield from DecisionReader(path).read(**filters)
    except AuditUnavailable as exc:
        raise ReplaySourceError(f"{path}: {exc}") from None


def _read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise ReplaySourceError(f"{path}:{number}: not a JSON line: {exc}") from None
            if not isinstance(record, dict) or "action" not in record or "verdict" not in record:
                raise ReplaySourceError(f"{path}:{number}: not a decision record (`warden audit export` writes them)")
            for name in ("actor_chain", "arguments"):
                if isinstance(record.get(name), str):
                    record[name] = json.loads(record[name])
            yield record
