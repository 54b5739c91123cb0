"""The touched values as rules read them (`touched` in a rule, docs/cel.md): the subject reader's
reading (policy/subjects/), not the text as written.

A rule over raw text misses the spellings the reader folds: `args.target.endsWith(".bank.example")`
is false for `X.BANK.EXAMPLE.`, `x.bank．example` and `https://x.bank.example/`, while scope and
off-limits read all three as the host `x.bank.example`. Each value is one map with every field
a rule can read present (empty when it does not apply), so a rule never needs `has()`:

- `kind`: `host`, `ip`, `url` or `name`; `text`: as the call wrote it;
- `host`: a host's (or a URL's host's) IDNA A-label form, lower case, without the trailing dot;
- `address`: an address (or a URL's) in its canonical text, a range as `address/prefix`; an
  IPv4-mapped IPv6 address is its IPv4 address; `range`: true for more than one address;
- `scheme`, `port` (the scheme's default when none is written, 0 when it has none), `path`
  (normalised: escapes of unreserved characters decoded, dot segments removed) of a URL;
- `name`: a name folded (compatibility forms, Unicode full stops) and in lower case, as the
  off-limits subjects compare names.

Built only when a rule that applies names `touched` (decide.py), with only the dimensions and
fields those rules select (`selection`), from the subjects the call's scope and off-limits checks
already read: no value is read twice.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from checkpoint.policy.policyset import SCOPE_DIMENSIONS
from checkpoint.policy.subjects import Subject, fold

# ::ffff:0:0/96: where the subject reader keeps IPv4, so one interval holds both families
_V4_MAPPED = 0xFFFF << 32
_V4_END = _V4_MAPPED + (1 << 32)

# for an action that touches nothing: every dimension present and empty
NOTHING: dict[str, list[Any]] = {dim: [] for dim in SCOPE_DIMENSIONS}


def address_of(span: tuple[int, int]) -> tuple[str, bool]:
    """(canonical text, is a range) of a subject's address span (always a CIDR block)."""
    low, high = span
    if _V4_MAPPED <= low and high < _V4_END:
        first: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address(low - _V4_MAPPED)
        bits = 32
    else:
        first, bits = ipaddress.IPv6Address(low), 128
    size = high - low + 1
    if size <= 1:
        return str(first), False
    return f"{first}/{bits - (size.bit_length() - 1)}", True


@functools.lru_cache(maxsize=4096)
def as_read(s: Subject) -> dict[str, Any]:
    """One value's map. Calls touch the same few values again and again, and a Subject is
    immutable, so the map is kept per value: shared, and never changed by its readers (the CEL
    engines convert it)."""
    host = address = scheme = path = name = ""
    wide = False
    port = 0
    at = s.of if s.kind == "url" and s.of is not None else s
    if at.kind == "host":
        host = at.host
    elif at.kind == "ip":
        address, wide = address_of(at.span)
    if s.kind == "url":
        scheme, port, path = s.scheme, s.port or 0, s.path
    elif s.kind == "name":
        name = fold(s.text).lower()
    return {"kind": s.kind, "text": s.text, "host": host, "address": address, "range": wide, "scheme": scheme,
            "port": port, "path": path, "name": name}


FIELDS = ("kind", "text", "host", "address", "range", "scheme", "port", "path", "name")
_SELECTED = re.compile(r"\btouched\s*\.\s*([A-Za-z_]\w*)")
_NAMED = re.compile(r"\btouched\b")
_FIELD = re.compile(r"\.\s*(" + "|".join(FIELDS) + r")\b")


class Selection(NamedTuple):
    """What of `touched` a set of conditions can read: each map costs the CEL engine a conversion
    per call, a field about a third of a microsecond, so the rest is not built."""

    dimensions: frozenset[str]
    fields: tuple[str, ...]


EVERYTHING = Selection(frozenset(SCOPE_DIMENSIONS), FIELDS)


def selection(conditions: Iterable[str]) -> Selection:
    """The dimensions these conditions select by name (`touched.subjects`; all of them when one
    names `touched` any other way, `touched` alone), and the fields any of them selects (`.host`):
    the type check refuses `s["host"]` on an object, so a field is only ever read as `.field`.
    Text inside a string literal counts too: that only builds more."""
    conditions = list(conditions)
    dimensions: set[str] = set()
    for condition in conditions:
        selected = _SELECTED.findall(condition)
        if len(selected) != len(_NAMED.findall(condition)):
            dimensions = set(SCOPE_DIMENSIONS)
            break
        dimensions.update(selected)
    fields = {f for condition in conditions if _NAMED.search(condition) for f in _FIELD.findall(condition)}
    return Selection(frozenset(dimensions), tuple(f for f in FIELDS if f in fields))


def touched_map(read: Mapping[str, Sequence[Subject]],
                selected: Selection = EVERYTHING) -> dict[str, list[dict[str, Any]]]:
    """`touched`: each scope dimension's values as read, in the order the call touches them; a
    dimension or a field no rule reads is left out of the maps (an empty list, a missing key)."""
    fields = selected.fields
    whole = fields == FIELDS
    out: dict[str, list[dict[str, Any]]] = {}
    for dim in SCOPE_DIMENSIONS:
        if dim not in selected.dimensions:
            out[dim] = []
        elif whole:
            out[dim] = [as_read(s) for s in read.get(dim, ())]
        else:
            out[dim] = [{f: m[f] for f in fields} for m in map(as_read, read.get(dim, ()))]
    return out
