"""Touched values read once per call: a URL, an address, a host, or a name (with the host a URL
parser would find in it)."""

from __future__ import annotations

import functools
import re
import unicodedata

from checkpoint.policy.subjects.addresses import IPV6ISH, ip_span
from checkpoint.policy.subjects.errors import SubjectError, show
from checkpoint.policy.subjects.folding import AN_ESCAPE, fold, percent_decoded
from checkpoint.policy.subjects.hosts import (
    HEAD_END,
    ends_in_number,
    host_2003,
    looks_like_host,
    normalise_host,
)
from checkpoint.policy.subjects.subject import Subject
from checkpoint.policy.subjects.urls import read_url

# A URL not written `scheme://host`: browsers and WHATWG parsers read `https:host`, `https:/host`,
# `http:\\host` and `//host` (scheme-relative) as a URL to `host`, so none of them may pass as a name.
_URL_WITHOUT_SLASHES = re.compile(r"(?:(?:https?|wss?|ftp):|[/\\]{2})", re.IGNORECASE)


def read_value(text: str) -> Subject:
    """Read a touched value; SubjectError when it looks like an address, host or URL and is not one.

    Calls name the same few targets again and again, so short values are read once per process
    (a Subject is immutable; refusals are not cached, and long values would only fill memory)."""
    return _read_cached(text) if len(text) <= 512 else _read_value(text)


def _read_value(text: str) -> Subject:
    folded = fold(text)
    if "://" in folded:
        return read_url(text, folded, pattern=False)[0]
    if _URL_WITHOUT_SLASHES.match(folded):
        raise SubjectError(f"{show(text)} reads as a URL to a host; write it scheme://host/path")
    if IPV6ISH.fullmatch(folded):
        return Subject("ip", text, span=ip_span(folded, strict=False))
    head = HEAD_END.split(folded, 1)[0]
    if ends_in_number(head):
        return Subject("ip", text, span=ip_span(folded, strict=False))
    if looks_like_host(head):
        host = normalise_host(folded)
        if ends_in_number(host):  # an address spelled in other characters: only canonical ones count
            return Subject("ip", text, span=ip_span(host, strict=False, prefix_ok=False))
        return Subject("host", text, host=host, alt=host_2003(folded, host))
    return _read_name(text, folded)


_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_AUTHORITY_END = re.compile(r"[/\\?#]")
_PORT = re.compile(r"[0-9]*")


def _read_name(text: str, folded: str) -> Subject:
    """A name, unless it holds characters a reader could drop or show otherwise: controls, invisible
    format characters (U+200B, the bidi overrides) or whitespace at either end make
    `customer:vip-1\n` or `customer:vi\u200bp-1` look like a name no off-limits entry matches, while a
    service that trims or ignores them works on `customer:vip-1`. The machine a URL parser would
    find in it comes along (`_machine_in`), for off-limits to weigh."""
    if text != text.strip():
        raise SubjectError(f"{show(text)}: a name does not start or end with whitespace")
    if _ASCII_CONTROL.search(text) if text.isascii() else any(
            unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise SubjectError(f"{show(text)}: control and invisible format characters are refused in a name")
    return Subject("name", text, machine=_machine_in(text, folded))


def _machine_in(text: str, folded: str) -> Subject | None:
    """The host a URL parser finds in a name, or None; SubjectError when the name names a machine
    in a way that cannot be read without doubt.

    curl takes a value without a scheme as `http://` and the value, and a tool may put any value
    after `http://` itself: then what comes before the first `/`, `\\`, `?` or `#` is
    `[userinfo@]host[:port]`. So `localhost:8080`, `localhost/x` and `db-main?x` are the hosts
    `localhost` and `db-main`; `customer:vip-1` is no host (its "port" is not a number).
    Refused: a login before a host (`u:p@127.0.0.1`, `customer:x@localhost`: the machine is after
    the `@`, as the docs promise for URLs), a host spelled with percent-escapes (WHATWG URL
    decodes them: `payments%2elab%2eexample%2ecom`), an address in brackets (`[::1]:80`), and a
    number where the host goes (`127?x` is 0.0.0.127 to a URL parser)."""
    authority = _AUTHORITY_END.split(folded, 1)[0]
    if "%" in authority and AN_ESCAPE.search(authority):
        decoded = percent_decoded(authority)
        if AN_ESCAPE.search(decoded):
            raise SubjectError(f"{show(text)}: escapes of escapes of escapes are refused where a host could be")
        try:
            plain = _read_value(decoded)
        except SubjectError:
            plain = None
        if plain is None or plain.kind != "name" or plain.machine is not None:
            raise SubjectError(f"{show(text)}: a host or address spelled with percent-escapes is refused")
        return None
    _, at, hostport = authority.rpartition("@")
    if at and hostport:
        raise SubjectError(f"{show(text)}: a login before a host (user@host) is refused; a URL parser"
                           " goes to the host after the '@'")
    if hostport.startswith("[") and ":" in hostport:
        raise SubjectError(f"{show(text)}: an address in brackets is written scheme://[address]/ or bare")
    host_text, colon, port = hostport.partition(":")
    if colon and _PORT.fullmatch(port) is None:
        return None
    try:
        host = normalise_host(host_text)
    except SubjectError:
        return None
    if ends_in_number(host):
        raise SubjectError(f"{show(text)}: a URL parser reads {host_text!r} as an address; write the canonical address")
    return Subject("host", host_text, host=host, alt=host_2003(host_text, host))


_read_cached = functools.lru_cache(maxsize=8192)(_read_value)


def _plain(text: str) -> Subject:
    return Subject("name", text)


_plain_cached = functools.lru_cache(maxsize=8192)(_plain)


def plain_name(text: str) -> Subject:
    """An untyped value (an image, a node) as a name, as written: short ones built once per process,
    like `read_value`'s, since building a Subject costs more than a cache lookup."""
    return _plain_cached(text) if len(text) <= 512 else Subject("name", text)
