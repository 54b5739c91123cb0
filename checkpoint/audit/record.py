"""The decision record: its fields, how a caller's mapping becomes a stored row, and its hash.

The hash recipe is the log's contract with auditors (docs/audit.md, "Hash chain"): keep it
byte-for-byte stable, or old logs stop verifying.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from checkpoint.audit.errors import InvalidAuditRecord

# Fields a caller may give, in stored column order. `decision_id` and `time` are filled in when
# absent; every other field defaults to null.
INPUT_FIELDS: tuple[str, ...] = (
    "decision_id",
    "time",
    "tenant",
    "run_id",
    "root_run_id",
    "parent_run_id",
    "actor_chain",
    "accountable_person",
    "agent",
    "agent_version",
    "action",
    "tool",
    "arguments",
    "verdict",
    "code",
    "rule",
    "reason",
    "policy_revision",
    "latency_us",
)
# What the hash covers: everything stored except the two chain columns themselves.
HASHED_FIELDS: tuple[str, ...] = ("seq", *INPUT_FIELDS)
COLUMNS: tuple[str, ...] = (*HASHED_FIELDS, "prev_hash", "hash")

ACTIONS = frozenset({"tool_call", "model_call", "delegation", "plan"})
VERDICTS = frozenset({"ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT"})
GENESIS_HASH = "0" * 64

_JSON_FIELDS = frozenset({"actor_chain", "arguments"})
_INT_FIELDS = frozenset({"latency_us"})
_INPUT_SET = frozenset(INPUT_FIELDS)
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
# Integers beyond 2**53 would be rounded by JSON tools that read numbers as doubles (and by
# RFC 8785 canonicalisers), so an auditor's recomputed hash could differ from ours.
_MAX_SAFE_INT = 2**53 - 1

# One encoder for every canonical form: sorted keys, no whitespace, UTF-8 text kept as is, no
# NaN/Infinity (not JSON). For the values a hashed record holds (strings, safe integers, null)
# this output is exactly RFC 8785 (JCS).
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False)


def canonical_json(value: Any) -> str:
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidAuditRecord(f"value is not canonical JSON: {exc}") from exc


def format_time(moment: datetime) -> str:
    """RFC 3339, UTC, microseconds, `Z`: fixed width, so text order is time order."""
    if moment.tzinfo is None:
        raise InvalidAuditRecord("time must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def to_row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    """Check a caller's record and return its values in INPUT_FIELDS order, as stored."""
    unknown = set(record) - _INPUT_SET
    if unknown:
        raise InvalidAuditRecord(f"unknown record field(s): {', '.join(sorted(unknown))}")
    values: list[Any] = []
    for name in INPUT_FIELDS:
        value = record.get(name)
        if name in _JSON_FIELDS:
            value = _json_field(name, value)
        elif name in _INT_FIELDS:
            if value is not None and (type(value) is not int or abs(value) > _MAX_SAFE_INT):
                raise InvalidAuditRecord(f"{name} must be an integer within +-2**53, got {value!r}")
        elif name == "time":
            value = _time_field(value)
        elif name == "decision_id" and value is None:
            value = uuid.uuid4().hex
        elif value is not None and type(value) is not str:
            raise InvalidAuditRecord(f"{name} must be a string, got {type(value).__name__}")
        if type(value) is str and not value.isascii():
            _check_utf8(name, value)
        values.append(value)
    action, verdict = record.get("action"), record.get("verdict")
    if action not in ACTIONS:
        raise InvalidAuditRecord(f"action must be one of {sorted(ACTIONS)}, got {action!r}")
    if verdict not in VERDICTS:
        raise InvalidAuditRecord(f"verdict must be one of {sorted(VERDICTS)}, got {verdict!r}")
    return tuple(values)


def _check_utf8(name: str, value: str) -> None:
    # A lone surrogate cannot be stored or hashed; caught here it fails one record, not a batch.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidAuditRecord(f"{name} is not valid Unicode text: {exc}") from exc


def _json_field(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if name == "actor_chain" and not isinstance(value, list | tuple):
        raise InvalidAuditRecord("actor_chain must be a list")
    if name == "arguments" and not isinstance(value, Mapping):
        raise InvalidAuditRecord("arguments must be a mapping (masked before it is logged)")
    return canonical_json(value if name != "arguments" else dict(value))


def _time_field(value: Any) -> str:
    if value is None:
        return now()
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str) and _TIME_RE.fullmatch(value):
        return value
    raise InvalidAuditRecord(f"time must be RFC 3339 UTC with microseconds, got {value!r}")


def record_hash(prev_hash: str, hashed: Mapping[str, Any]) -> str:
    """sha256( prev_hash as 64 ASCII hex digits || canonical JSON of the hashed fields, UTF-8 )."""
    payload = prev_hash + _CANONICAL.encode(hashed)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as a caller sees it: JSON columns parsed."""
    out = dict(row)
    for name in _JSON_FIELDS:
        text = out.get(name)
        if text is not None:
            out[name] = json.loads(text)
    return out
