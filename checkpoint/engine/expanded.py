"""The values a filled template expands into, read as subjects (docs/skills.md).

A reviewed template is text a person read, not authority: its command may name a host beside
TARGET, and that host reaches the tool as surely as the target does. So every string of the spec
the checkpoint filled (`args.spec` of a `templates: resolve` tool) but its image and node (the
call's own `image` and `node`, fenced by their scope dimensions) is read like a touched subject, and so is every piece of it that reads as a host or an address: a command word such
as `root@db.example.com`, `x:db.example.com` or `TARGET,db.example.com` hides a host inside
text that as a whole reads as a name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from checkpoint.policy.subjects import Subject, SubjectError, fold, read_value

# Pieces are cut at every character a host name cannot hold; a second cut keeps `:` and brackets,
# so that an IPv6 address inside a word (`--to=[fd00::1]`) is read whole too.
_HOST_CUT = re.compile(r"[^0-9A-Za-z._\-\u0080-\U0010ffff]+")
_ADDRESS_CUT = re.compile(r"[^0-9A-Za-z._\-:\[\]\u0080-\U0010ffff]+")


def strings_of(value: Any, leave_out: Iterable[str] = ()) -> Iterator[str]:
    """Every string inside a JSON value (map values and list items, at any depth), but the
    values of the top-level keys `leave_out`."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in leave_out:
                yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


def pieces(text: str) -> list[Subject]:
    """The hosts and addresses inside `text` other than `text` itself. A piece that is not a valid
    host or address is no subject (a port, a flag): the whole text was already read strictly."""
    folded = fold(text)
    found: dict[str, Subject] = {}
    for cut in (_HOST_CUT, _ADDRESS_CUT):
        for piece in cut.split(folded):
            piece = piece.strip("[]").lstrip("-")
            if not piece or piece == text or piece in found:
                continue
            try:
                subject = read_value(piece)
            except SubjectError:
                continue
            if subject.kind in ("host", "ip"):
                found[piece] = subject
    return list(found.values())
