"""The decision record: its fields, how a caller's mapping becomes a stored row, and its hash.

The hash recipe is the log's contract with auditors (docs/audit.md, "Hash chain"): keep it
byte-for-byte stable, or old logs stop verifying.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from operator import attrgetter, itemgetter
from typing import Any

from checkpoint.audit.errors import InvalidAuditRecord
from warden import canonical

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
    "principal",
    "caller",
    "call_digest",
    "approval_rules",
    # schema 3: the answer with the policy files' `mode: shadow` rules enforced, beside the
    # enforced one (null when the loaded files have no shadow rule)
    "shadow_verdict",
    "shadow_code",
    "shadow_rule",
    # schema 4: who approved (on an approval or rejection, and on the call an approval let
    # through), the decision id of the approval record that call spent, and the W3C trace id
    # the request carried in its `traceparent` metadata
    "approver",
    "approval_id",
    "trace_id",
)
# What the hash covers: everything stored except the two chain columns themselves.
HASHED_FIELDS: tuple[str, ...] = ("seq", *INPUT_FIELDS)
COLUMNS: tuple[str, ...] = (*HASHED_FIELDS, "prev_hash", "hash")
CHAIN_COLUMNS = ("prev_hash", "hash")

# The columns each schema version stored, so a log (or a sealed segment) written by an older
# warden keeps verifying: its records hash exactly the fields its own file has (docs/audit.md,
# "Hash chain"). A version is the one before plus the columns it added, appended at the end.
_ADDED = {
    2: ("principal", "caller", "call_digest", "approval_rules"),
    3: ("shadow_verdict", "shadow_code", "shadow_rule"),
    4: ("approver", "approval_id", "trace_id"),
}
_V1 = tuple(name for name in HASHED_FIELDS if not any(name in added for added in _ADDED.values()))
SCHEMA_HASHED: dict[int, tuple[str, ...]] = {1: _V1}
for _version in sorted(_ADDED):
    SCHEMA_HASHED[_version] = (*SCHEMA_HASHED[_version - 1], *_ADDED[_version])
SCHEMA_COLUMNS: dict[int, tuple[str, ...]] = {v: (*f, *CHAIN_COLUMNS) for v, f in SCHEMA_HASHED.items()}
assert SCHEMA_HASHED[max(SCHEMA_HASHED)] == HASHED_FIELDS

# "none": a request refused before it named an action (unparseable, unauthenticated ResolveAgent,
# no action at all). Nothing decided goes unrecorded, refusals included.
# "start_run", "approval", "rejection": acts that are not a proposed step but belong on the record.
# "resume", "cancel", "amend", "pause": a person's acts on a run, recorded by the caller that
# authenticated them. "catalog": a change to the agent catalog (propose, approve, reject, retire),
# its skills and templates included. "load_skill": a run read one of its pinned skills (docs/skills.md).
# "end": a run stopped (succeeded, failed, cancelled, paused), recorded by its token's holder.
# "learning": an act on a learning (propose, occurrence, promote, review, reject, retire, stale).
# "expire": a REQUIRE_APPROVAL's deadline passed unanswered, recorded by its run's driver.
# "gateway": an MCP gateway's own decision, a tools/list it filtered or a call it refused (docs/mcp.md).
# "notify": one attempt to deliver a notification of a decision to a webhook (docs/approvals.md).
ACTIONS = frozenset({"tool_call", "model_call", "delegation", "plan", "none", "start_run", "approval", "rejection",
                     "resume", "cancel", "amend", "pause", "catalog", "end", "load_skill", "learning",
                     "expire", "notify", "gateway"})
VERDICTS = frozenset({"ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT"})
GENESIS_HASH = "0" * 64

_JSON_FIELDS = frozenset({"actor_chain", "arguments"})
_INT_FIELDS = frozenset({"latency_us"})
_INPUT_SET = frozenset(INPUT_FIELDS)
_TIME_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
# Integers beyond 2**53 would be rounded by JSON tools that read numbers as doubles (and by
# RFC 8785 canonicalisers), so an auditor's recomputed hash could differ from ours.
_MAX_SAFE_INT = canonical.MAX_SAFE_INTEGER
# A NUL in any text of a record is stored as U+FFFD, before the record is hashed: PostgreSQL's text
# cannot hold NUL (nor its jsonb the escape \u0000), a text the caller controls (a tool's
# arguments, their keys) must not turn a decision into one the log refuses, and the same record
# must hash the same on every backend. The grant keeps the arguments as sent (json_column).
NUL, REPLACEMENT = "\x00", "\ufffd"
_NUL_ESCAPE = "\\u0000"


class CanonicalJson(str):
    """The text of a JSON column (`arguments`, `actor_chain`) already made by `json_column`, for a
    value the caller encodes anyway (a grant's hash of the arguments) or keeps (a run's actor chain,
    the same for every call of the run): `to_row` stores it as it is instead of encoding the value
    again. Made only by `json_column`, so it has passed the same checks as a value would."""

    __slots__ = ()


def json_column(name: str, value: Any) -> CanonicalJson:
    """`value` checked and encoded as `to_row` would store it in column `name`."""
    text = _json_field(name, value)
    if text is None:
        raise InvalidAuditRecord(f"{name} is null")
    return CanonicalJson(text)


def canonical_json(value: Any) -> str:
    """RFC 8785 text of a value (warden.canonical): the form the JSON columns are stored in."""
    try:
        return canonical.dumps_text(value)
    except (TypeError, ValueError) as exc:
        raise InvalidAuditRecord(f"value is not canonical JSON: {exc}") from exc


def format_time(moment: datetime) -> str:
    """RFC 3339, UTC, microseconds, `Z`: fixed width, so text order is time order."""
    if moment.tzinfo is None:
        raise InvalidAuditRecord("time must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_second_cache: tuple[int, str] = (-1, "")


def format_time_ns(ns: int) -> str:
    """`format_time` for nanoseconds since the epoch, as `time.time_ns()` gives them."""
    # Formatting the whole timestamp costs more than the rest of a record's checks; the
    # seconds part changes once a second, so it is formatted once and cached.
    global _second_cache
    second, micro = divmod(ns // 1000, 1_000_000)
    cached = _second_cache
    if cached[0] != second:
        cached = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        _second_cache = cached
    return f"{cached[1]}.{micro:06d}Z"


def now() -> str:
    return format_time_ns(time.time_ns())


_ACTOR, _ARGS, _LATENCY, _ACTION, _VERDICT, _SHADOW_VERDICT = (
    INPUT_FIELDS.index(name) for name in ("actor_chain", "arguments", "latency_us", "action", "verdict", "shadow_verdict")
)
_TEXT_FIELDS = tuple(
    (i, name) for i, name in enumerate(INPUT_FIELDS) if name not in _JSON_FIELDS | _INT_FIELDS | {"time"}
)


@dataclass(slots=True)
class DecisionRecord:
    """One record of the decision log, as the checkpoint builds it: every field of INPUT_FIELDS, in
    that order, null unless set. `to_row` checks it and gives the stored values; the chain hashes
    those (docs/audit.md). A misspelt field is an error where it is written, not a silent column."""

    decision_id: str | None = None
    time: str | None = None
    tenant: str | None = None
    run_id: str | None = None
    root_run_id: str | None = None
    parent_run_id: str | None = None
    actor_chain: Any = None  # a list of actors, or its CanonicalJson text
    accountable_person: str | None = None
    agent: str | None = None
    agent_version: str | None = None
    action: str | None = None
    tool: str | None = None
    arguments: Any = None  # a mapping, or its CanonicalJson text
    verdict: str | None = None
    code: str | None = None
    rule: str | None = None
    reason: str | None = None
    policy_revision: str | None = None
    latency_us: int | None = None
    principal: str | None = None
    caller: str | None = None
    call_digest: str | None = None
    approval_rules: str | None = None
    shadow_verdict: str | None = None
    shadow_code: str | None = None
    shadow_rule: str | None = None
    approver: str | None = None
    approval_id: str | None = None
    trace_id: str | None = None


assert tuple(f.name for f in fields(DecisionRecord)) == INPUT_FIELDS
_VALUES_OF = attrgetter(*INPUT_FIELDS)


def to_row(record: DecisionRecord | Mapping[str, Any]) -> tuple[Any, ...]:
    """Check a record and return its values in INPUT_FIELDS order, as stored. A mapping (a record
    read back, or written by hand) is held to the same fields.

    Runs on every decision, so it is written for speed: one pass to collect, then fix-ups by
    position.
    """
    if type(record) is DecisionRecord:
        values = list(_VALUES_OF(record))
    else:
        assert isinstance(record, Mapping)
        if not record.keys() <= _INPUT_SET:
            unknown = sorted(set(record) - _INPUT_SET)
            raise InvalidAuditRecord(f"unknown record field(s): {', '.join(unknown)}")
        get = record.get
        values = [get(name) for name in INPUT_FIELDS]
    if values[0] is None:
        values[0] = uuid.uuid4().hex
    values[1] = _time_field(values[1])
    for i, name in _TEXT_FIELDS:
        value = values[i]
        if value is not None and (type(value) is not str or not value.isascii() or NUL in value):
            _check_text(name, value)
            values[i] = value.replace(NUL, REPLACEMENT)
    if values[_ACTOR] is not None:
        values[_ACTOR] = _without_nul(_json_field("actor_chain", values[_ACTOR]))
    if values[_ARGS] is not None:
        values[_ARGS] = _without_nul(_json_field("arguments", values[_ARGS]))
    latency = values[_LATENCY]
    if latency is not None and (type(latency) is not int or abs(latency) > _MAX_SAFE_INT):
        raise InvalidAuditRecord(f"latency_us must be an integer within +-2**53, got {latency!r}")
    if values[_ACTION] not in ACTIONS:
        raise InvalidAuditRecord(f"action must be one of {sorted(ACTIONS)}, got {values[_ACTION]!r}")
    if values[_VERDICT] not in VERDICTS:
        raise InvalidAuditRecord(f"verdict must be one of {sorted(VERDICTS)}, got {values[_VERDICT]!r}")
    if values[_SHADOW_VERDICT] is not None and values[_SHADOW_VERDICT] not in VERDICTS:
        raise InvalidAuditRecord(f"shadow_verdict must be one of {sorted(VERDICTS)} or null, "
                                 f"got {values[_SHADOW_VERDICT]!r}")
    return tuple(values)


def _without_nul(text: str | None) -> str | None:
    """A JSON column's text with each NUL in its strings and keys made U+FFFD. Canonical JSON
    writes a NUL as the escape \\u0000 (an escaped backslash followed by `u0000` also contains it:
    decoding tells the two apart), and only such a text pays for decoding."""
    if text is None or _NUL_ESCAPE not in text:
        return text
    return canonical_json(_replace_nul(json.loads(text, parse_int=_parse_int)))


def _parse_int(digits: str) -> int | float:
    # Canonical JSON writes a whole double beyond 2**53 (2.0**60) in integer digits; read back, it
    # is that double again, not an integer the encoder would refuse.
    number = int(digits)
    return number if abs(number) <= _MAX_SAFE_INT else float(number)


def _replace_nul(value: Any) -> Any:
    if type(value) is str:
        return value.replace(NUL, REPLACEMENT)
    if type(value) is dict:
        return {_replace_nul(k): _replace_nul(v) for k, v in value.items()}
    if type(value) is list:
        return [_replace_nul(v) for v in value]
    return value


def _check_text(name: str, value: Any) -> None:
    if type(value) is not str:
        raise InvalidAuditRecord(f"{name} must be a string, got {type(value).__name__}")
    _check_utf8(name, value)


def _check_utf8(name: str, value: str) -> None:
    # A lone surrogate cannot be stored or hashed; caught here it fails one record, not a batch.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidAuditRecord(f"{name} is not valid Unicode text: {exc}") from exc


def _json_field(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if type(value) is CanonicalJson:
        return str.__str__(value)
    if name == "actor_chain" and not isinstance(value, list | tuple):
        raise InvalidAuditRecord("actor_chain must be a list")
    if name == "arguments" and not isinstance(value, Mapping):
        raise InvalidAuditRecord("arguments must be a mapping (masked before it is logged)")
    text = canonical_json(dict(value) if name == "arguments" and type(value) is not dict else value)
    if not text.isascii():
        _check_utf8(name, text)
    return text


def _time_field(value: Any) -> str:
    if value is None:
        return now()
    if isinstance(value, datetime):
        return format_time(value)
    if isinstance(value, str) and _TIME_RE.fullmatch(value):
        return value
    raise InvalidAuditRecord(f"time must be RFC 3339 UTC with microseconds, got {value!r}")


class _Recipe:
    """How the hashed fields of one schema are laid out in the canonical object."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.sorted_fields = tuple(sorted(fields))
        self.in_sorted_order = itemgetter(*(fields.index(name) for name in self.sorted_fields))
        # '{"accountable_person":', ',"action":', ... : what precedes each value in the canonical object.
        self.key_prefixes = tuple(("{" if i == 0 else ",") + f'"{name}":' for i, name in enumerate(self.sorted_fields))


_RECIPES: dict[tuple[str, ...], _Recipe] = {}


def _recipe(fields: tuple[str, ...]) -> _Recipe:
    recipe = _RECIPES.get(fields)
    if recipe is None:
        recipe = _RECIPES[fields] = _Recipe(fields)
    return recipe


_CURRENT = _recipe(HASHED_FIELDS)


def record_hash(prev_hash: str, hashed_values: tuple[Any, ...], fields: tuple[str, ...] | None = None) -> str:
    """sha256( prev_hash as 64 ASCII hex digits || canonical JSON of the hashed fields, UTF-8 ).

    ``hashed_values`` are the values of ``fields`` (default HASHED_FIELDS, this schema's), in that
    order; a record of an older schema hashes the fields its own file has (SCHEMA_HASHED).
    """
    recipe = _CURRENT if fields is None else _recipe(fields)
    values = recipe.in_sorted_order(hashed_values)
    # The object is written piece by piece: the same bytes as RFC 8785 (strings through the C
    # encoder's own escaping function, which escapes exactly what RFC 8785 does; integers in
    # decimal; null), at half the cost. Any other type, or an integer subclass, goes through
    # warden.canonical itself.
    parts = [prev_hash]
    for prefix, value in zip(recipe.key_prefixes, values, strict=True):
        kind = type(value)
        if kind is str:
            parts.append(prefix + _encode_string(value))
        elif value is None:
            parts.append(prefix + "null")
        elif kind is int:
            parts.append(prefix + int.__repr__(value))
        else:
            text = canonical.dumps_text(dict(zip(recipe.sorted_fields, values, strict=True)))
            return hashlib.sha256((prev_hash + text).encode("utf-8")).hexdigest()
    parts.append("}")
    return hashlib.sha256("".join(parts).encode("utf-8")).hexdigest()


_encode_string = json.encoder.encode_basestring  # what an ensure_ascii=False encoder uses


def from_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored row as a caller sees it: JSON columns parsed."""
    out = dict(row)
    for name in _JSON_FIELDS:
        text = out.get(name)
        if text is not None:
            out[name] = json.loads(text)
    return out
