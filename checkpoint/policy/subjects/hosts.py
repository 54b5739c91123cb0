"""Host names: IDNA 2008 A-labels, lower case, without the trailing dot, and the IDNA 2003
spelling a client may look up beside it."""

from __future__ import annotations

import re
from collections.abc import Iterator

import idna

from checkpoint.policy.subjects.errors import SubjectError, show
from checkpoint.policy.subjects.folding import fold

_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")
HEAD_END = re.compile(r"[/:]")
# An ASCII label; `_` for service names like _dmarc. Never `-` at either end (RFC 952/1123): a
# target `-iLx.lab.example.com` inside `*.lab.example.com` would reach a tool's argv as an option.
_LDH = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")


def ends_in_number(host: str) -> bool:
    """WHATWG URL: a host whose last label is a number is an IPv4 address, or nothing."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    return _NUMBER.fullmatch(labels[-1]) is not None


def looks_like_host(head: str) -> bool:
    return "." in head and any(c.isalnum() for c in head)


def normalise_host(text: str) -> str:
    """`text` (already folded) as A-labels, lower case, without the trailing dot; or SubjectError."""
    if not text.isascii():
        try:
            text = idna.uts46_remap(text, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise SubjectError(f"{show(text)} is not a host name: {exc}") from None
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        raise SubjectError(f"{show(text)} is not a host name (1 to 253 characters)")
    labels = host.split(".")
    for i, label in enumerate(labels):
        if label.isascii() and not label.startswith("xn--"):
            if _LDH.fullmatch(label) is None:
                raise SubjectError(
                    f"{show(text)} is not a host name (a label is 1 to 63 letters, digits, '-' or '_', and"
                    " starts and ends with no '-'; a port or a path is not part of a host)"
                )
            continue
        try:  # a U-label is encoded, an A-label is checked by decoding it
            labels[i] = idna.alabel(label).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise SubjectError(f"{show(text)} is not a host name: {exc}") from None
    return ".".join(labels)


def host_2003(text: str, host: str) -> str:
    """The host as IDNA 2003 spells `text` (CPython's `idna` codec, the one its resolver uses: `ß`
    and `ẞ` are `ss`, `ς` is `σ`, ZWJ and ZWNJ are dropped), when that is another name than `host`,
    its IDNA 2008 spelling; "" otherwise. Both are names a client may look up for the same text."""
    if text.isascii():
        return ""
    try:
        alt = text.encode("idna").decode("ascii").lower()
    except UnicodeError:  # no IDNA 2003 spelling: a client on it reaches nothing
        return ""
    alt = alt[:-1] if alt.endswith(".") else alt
    return "" if alt == host else alt


def parents(host: str) -> Iterator[str]:
    """`a.b.c` -> `b.c`, `c`."""
    i = host.find(".")
    while i != -1:
        yield host[i + 1:]
        i = host.find(".", i + 1)


def as_host(glob: str) -> tuple[str, ...]:
    """A name entry without wildcards that is a valid host name (a single label: it holds no dot,
    or it would have been read as a host), as its host spellings (IDNA 2008, and 2003 when it
    differs); () otherwise."""
    if "*" in glob or "?" in glob:
        return ()
    folded = fold(glob)
    try:
        host = normalise_host(folded)
    except SubjectError:
        return ()
    if ends_in_number(host):
        return ()
    alt = host_2003(folded, host)
    return (host, alt) if alt else (host,)
