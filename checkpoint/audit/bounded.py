"""A refusal's record, bounded: whatever a refused caller sent, its record stays small.

A refusal (an invalid or unauthenticated request) is recorded without a decision, so nothing
upstream has limited its fields: a 900 KB run id would be stored, and hashed into the chain, as is.
`bound_refusal` caps every string of the record at `MAX_CHARS` characters, the rest replaced by a
marker naming the full length and its sha256 (enough to match the value against other evidence),
keeps at most `MAX_ACTORS` links of the actor chain, and keeps the arguments only as the sha256
and size of their JSON form.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from checkpoint.audit.record import INPUT_FIELDS, DecisionRecord

MAX_CHARS = 256
MAX_ACTORS = 8


def cap(value: str) -> str:
    """`value` if it is at most MAX_CHARS long, else its start and a marker with its sha256."""
    if len(value) <= MAX_CHARS:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{value[:MAX_CHARS]}...[capped: {len(value)} characters, sha256:{digest}]"


def _capped(value: Any) -> Any:
    if isinstance(value, str):
        return cap(value)
    if isinstance(value, dict):
        return {cap(str(k)): _capped(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_capped(v) for v in value]
    return value


def _digest(value: Any) -> dict[str, Any]:
    """The sha256 and size of a value's JSON form; any value has one (NaN included)."""
    if isinstance(value, dict) and set(value) == {"sha256", "bytes"}:
        return value  # already reduced (a tool the policy does not know)
    data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    encoded = data.encode("utf-8", "surrogatepass")
    return {"sha256": hashlib.sha256(encoded).hexdigest(), "bytes": len(encoded)}


def bound_refusal(record: Mapping[str, Any] | DecisionRecord) -> dict[str, Any]:
    """The same record with every string capped, the chain shortened, the arguments digested."""
    if isinstance(record, DecisionRecord):
        record = {name: getattr(record, name) for name in INPUT_FIELDS}
    out = {name: _capped(value) for name, value in record.items() if name not in ("actor_chain", "arguments")}
    chain = record.get("actor_chain") or []
    kept = [_capped(actor) for actor in chain[:MAX_ACTORS]]
    if len(chain) > MAX_ACTORS:
        kept.append({"kind": "capped", "id": f"{len(chain) - MAX_ACTORS} more actors",
                     **_digest(chain[MAX_ACTORS:])})
    out["actor_chain"] = kept
    arguments = record.get("arguments")
    out["arguments"] = None if arguments is None else _digest(arguments)
    return out
