"""Typed subjects: scope entries, off-limits entries and touched values compared by meaning.

A glob over raw text lets the same machine through under another spelling (`XN--...`, `0x0a090909`,
`10.20.0.evil.com`, `/v1/../admin`). So every entry and every value is read once into one of four
types, and only values and entries of the same type are compared:

- `host`: a DNS name as IDNA 2008 A-labels, lower case, without the trailing dot.
- `ip`: an address or a range (IPv4 kept as its IPv4-mapped IPv6 range, so one integer interval
  holds both families and `::ffff:10.9.9.9` is `10.9.9.9`).
- `url`: scheme, host (a `host` or an `ip`), port, and a normalised path.
- `name`: anything else (`customer:vip-1`), matched by glob as before.

How text is read (`read_value`, and `read_pattern` for entries; docs/policies.md has the table):
text is NFKC-folded, its default-ignorable code points dropped, and the Unicode full stops become
`.`; then it is a URL when it contains
`://`; a value is refused when it is a URL written another way (`//host`, `https:host`); an IPv6
address when it is hex digits and at least two `:`; an IPv4 address when the part before its
first `/` or `:` ends in a number (the WHATWG URL rule: the last label is decimal or
`0x` hex); a host when that part holds a dot and a letter or digit; a name otherwise. Text that
looks like an address, host or URL but is not a valid one raises SubjectError: a call carrying it
is refused with `invalid_arguments`, a policy entry is a load error. Only canonical dotted quads
are IPv4 addresses, so `167641093`, `0x0a090909`, `10.9.2313` and `010.9.9.9` are refused, never
guessed at.

A name also carries the host a URL parser would find in it (`localhost:8080` is the host
`localhost`; `Subject.machine`), which off-limits weighs too; a name that holds a login before a
host, a percent-escaped host or a bracketed address is refused. A host carries its IDNA 2003
spelling beside its IDNA 2008 one when they differ (`Subject.alt`: `weiß` is also `weiss`), and a
URL its path with slash look-alikes kept beside the path that reads them as `/` (`alt_path`):
off-limits refuses when any reading matches, scope admits only when every reading is inside.

Everything here runs at policy load, except `read_value`, once per touched value per call.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote, urlsplit

import idna

Kind = Literal["host", "ip", "url", "name"]
KINDS: tuple[Kind, ...] = ("host", "ip", "url", "name")


class SubjectError(ValueError):
    """Text that looks like a host, an address or a URL, and is not a valid one."""


def _show(text: str) -> str:
    return repr(text[:80] + ("..." if len(text) > 80 else ""))


# -- reading text -------------------------------------------------------------------------

_DOTS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})
_IPV6ISH = re.compile(r"\[?[0-9a-f.]*(?::[0-9a-f.]*){2,}\]?(?:%[^/]*)?(?:/[^/]*)?", re.IGNORECASE)
_NUMBER = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")
_HEAD_END = re.compile(r"[/:]")
_PREFIX = re.compile(r"([^/]+)(?:/(0|[1-9][0-9]{0,2}))?")
_LEGACY_V4 = re.compile(r"((?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){1,3})\*")
# An ASCII label; `_` for service names like _dmarc. Never `-` at either end (RFC 952/1123): a
# target `-iLx.lab.example.com` inside `*.lab.example.com` would reach a tool's argv as an option.
_LDH = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_V4_MAPPED = 0xFFFF << 32  # ::ffff:0:0/96, where IPv6 keeps IPv4 addresses
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:]*)(?::([0-9]*))?")  # a URL's netloc without userinfo
# A URL not written `scheme://host`: browsers and WHATWG parsers read `https:host`, `https:/host`,
# `http:\\host` and `//host` (scheme-relative) as a URL to `host`, so none of them may pass as a name.
_URL_WITHOUT_SLASHES = re.compile(r"(?:(?:https?|wss?|ftp):|[/\\]{2})", re.IGNORECASE)


# Default-ignorable code points (variation selectors, the soft hyphen, tags, Hangul fillers, the
# invisible format characters) are drawn as nothing, and IDNA and many services drop them: a reader
# that kept them would see `local<U+FE0F>host` where a client sees `localhost`. ZWJ and ZWNJ stay:
# IDNA 2008 keeps them in some labels, so the host reader reads both spellings (`_host_2003`).
# Compiled on the first non-ASCII text: importing `regex` and building the class costs ~40 ms,
# which a CLI start on ASCII policies need not pay.
@functools.cache
def _ignorable() -> re.Pattern[str]:
    import regex

    pattern: re.Pattern[str] = regex.compile(r"[\p{Default_Ignorable_Code_Point}--[\u200c\u200d]]+", regex.V1)
    return pattern


def fold(text: str) -> str:
    """Compatibility forms folded (full-width letters and digits, `⒈`), default-ignorable code
    points removed, Unicode full stops as `.`."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKC", text)
    stripped = _ignorable().sub("", text)
    if stripped != text:  # a mark that followed a removed character may now compose
        text = unicodedata.normalize("NFKC", stripped)
    return text.translate(_DOTS)


def _ends_in_number(host: str) -> bool:
    """WHATWG URL: a host whose last label is a number is an IPv4 address, or nothing."""
    labels = host.split(".")
    if len(labels) > 1 and labels[-1] == "":
        labels.pop()
    return _NUMBER.fullmatch(labels[-1]) is not None


def _looks_like_host(head: str) -> bool:
    return "." in head and any(c.isalnum() for c in head)


def normalise_host(text: str) -> str:
    """`text` (already folded) as A-labels, lower case, without the trailing dot; or SubjectError."""
    if not text.isascii():
        try:
            text = idna.uts46_remap(text, std3_rules=False, transitional=False)
        except idna.IDNAError as exc:
            raise SubjectError(f"{_show(text)} is not a host name: {exc}") from None
    host = text.lower()
    if host.endswith("."):
        host = host[:-1]
    if not host or len(host) > 253:
        raise SubjectError(f"{_show(text)} is not a host name (1 to 253 characters)")
    labels = host.split(".")
    for i, label in enumerate(labels):
        if label.isascii() and not label.startswith("xn--"):
            if _LDH.fullmatch(label) is None:
                raise SubjectError(
                    f"{_show(text)} is not a host name (a label is 1 to 63 letters, digits, '-' or '_', and"
                    " starts and ends with no '-'; a port or a path is not part of a host)"
                )
            continue
        try:  # a U-label is encoded, an A-label is checked by decoding it
            labels[i] = idna.alabel(label).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise SubjectError(f"{_show(text)} is not a host name: {exc}") from None
    return ".".join(labels)


def _host_2003(text: str, host: str) -> str:
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


def _span(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[int, int]:
    low = int(net.network_address) + (_V4_MAPPED if net.version == 4 else 0)
    return low, low + net.num_addresses - 1


def _ip_span(text: str, *, strict: bool, prefix_ok: bool = True) -> tuple[int, int]:
    """An address or CIDR range, canonical spellings only. `strict`: no host bits after the prefix."""
    m = _PREFIX.fullmatch(text)
    if m is None or (m.group(2) is not None and not prefix_ok):
        raise SubjectError(f"{_show(text)} is not an IP address" + ("" if prefix_ok else " (no /prefix here)"))
    address, bits = m.group(1), m.group(2)
    if address.startswith("[") or "%" in address:
        raise SubjectError(f"{_show(text)}: brackets and zone ids (%eth0) are not part of an address")
    try:
        parsed = ipaddress.ip_address(address)  # refuses 010.9.9.9, 10.9.2313, 0x0a090909
    except ValueError:
        raise SubjectError(
            f"{_show(text)} is not a canonical IP address (IPv4 is four decimal numbers, no leading zeros)"
        ) from None
    if bits is None:  # one address: skip building a network, the common case on the hot path
        low = int(parsed) + (_V4_MAPPED if parsed.version == 4 else 0)
        return low, low
    try:
        net = ipaddress.ip_network(f"{parsed}/{bits}", strict=strict)
    except ValueError as exc:
        raise SubjectError(f"{_show(text)} is not an IP range: {exc}") from None
    return _span(net)


# -- URL paths ----------------------------------------------------------------------------

_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-F]{2})")
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# A server that decodes once more would read these as path structure: `/`, `\`, NUL, or a new escape.
_SLASHES = re.compile(r"/{2,}")
_REFUSED_ESCAPES = frozenset({"2F", "5C", "00", "25"})
_URL_REFUSED = re.compile(r"[\x00-\x20\x7f\\]")  # whitespace, controls, and `\` (read as `/` by browsers)
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


def _unescape(m: re.Match[str]) -> str:
    hex_ = m.group(1).upper()
    if hex_ in _REFUSED_ESCAPES:
        raise SubjectError(f"the escape %{hex_} is refused in a URL path")
    char = chr(int(hex_, 16))
    return char if char in _UNRESERVED else "%" + hex_


_HIGH_ESCAPES = re.compile(r"(?:%[89A-Fa-f][0-9A-Fa-f])+")


@functools.cache
def _slash_look_alikes() -> tuple[frozenset[str], frozenset[str]]:
    """Symbols that Unicode's confusables (TR39) list as look-alikes of `/` and of `\\`: a server
    that maps characters to a code page's best fit (IIS) or folds confusables reads them as the
    slash. Letters (`ノ`, `丿`) are left alone: they are words in a path. Loaded on first need."""
    from confusable_homoglyphs import confusables

    def of(char: str) -> frozenset[str]:
        found = confusables.is_confusable(char, preferred_aliases=[], greedy=True) or []
        return frozenset(h["c"] for f in found for h in f["homoglyphs"]
                         if not unicodedata.category(h["c"]).startswith("L"))

    return of("/"), of("\\")


def _as_slash(char: str) -> str:
    """`/` for a slash look-alike (or a character NFKC folds to `/`), the character otherwise;
    SubjectError for a backslash look-alike (a backslash is refused in a URL)."""
    folded = unicodedata.normalize("NFKC", char)
    slashes, backslashes = _slash_look_alikes()
    if folded == "/" or char in slashes:
        return "/"
    if folded == "\\" or char in backslashes:
        raise SubjectError(f"U+{ord(char):04X} reads as a backslash; refused in a URL path")
    return char


def _unescape_look_alikes(m: re.Match[str]) -> str:
    try:
        text = bytes.fromhex(m.group().replace("%", "")).decode("utf-8")
    except UnicodeDecodeError:
        return m.group()
    out = []
    for char in text:
        mapped = _as_slash(char)
        out.append(mapped if mapped == "/" else "".join(f"%{b:02X}" for b in char.encode()))
    return "".join(out)


def map_look_alikes(path: str) -> str:
    """The path with each slash look-alike, written or percent-escaped as UTF-8, as `/`."""
    if path.isascii() and "%" not in path:
        return path
    if "%" in path:
        path = _HIGH_ESCAPES.sub(_unescape_look_alikes, path)
    return path if path.isascii() else "".join(_as_slash(c) if not c.isascii() else c for c in path)


def normalise_path(path: str) -> str:
    """RFC 3986 6.2.2: escapes of unreserved characters decoded (so `%2e%2e` is `..`), other
    escapes upper case, dot segments removed (5.2.4). An empty path is `/`."""
    if "%" in path:
        path = _ESCAPE.sub(_unescape, path)
        if _STRAY_PERCENT.search(path):
            raise SubjectError("a '%' in a URL path that is not an escape")
    out: list[str] = []
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    for segment in segments:
        bare = segment.split(";", 1)[0]
        if bare not in (".", ".."):
            out.append(segment)
        elif segment != bare:  # `..;x` is `..` to some servers (Tomcat): refuse rather than guess
            raise SubjectError("parameters on a dot segment ('..;') are refused in a URL path")
        elif bare == ".." and out and out[-1] == "":
            # `/v1//../admin` is `/v1/admin` to RFC 3986 but `/admin` to a server that merges
            # slashes first (nginx's default): refuse rather than guess
            raise SubjectError("a '..' after an empty segment ('//..') is refused in a URL path")
        elif bare == ".." and out:
            out.pop()
    if segments and segments[-1].split(";", 1)[0] in (".", ".."):
        out.append("")  # `/a/b/..` is the folder `/a/`
    return "/" + "/".join(out)


# -- globs (names, URL paths, and the untyped dimensions) ---------------------------------


def glob_to_regex(pattern: str, *, wide: bool = False) -> str:
    """A glob as a regular expression.

    `*` matches within one path segment: any run of characters except `/` and whitespace, so
    `*.lab.example.com` does not admit `evil.org .lab.example.com`. `**` also crosses `/` (for
    image paths and URL paths). `?` matches one such character. Everything else is literal (no
    character classes). A pattern that is only `*` means "anything": the unfenced scope an
    operator wrote out.

    `wide` is the off-limits reading, the one that refuses more: `*` and `**` match any run of
    characters and `?` any one (compile with re.DOTALL), so `customer:vip-*` also refuses
    `customer:vip-1/x` and `customer:vip-1 x`, which a scope's `*` would not let in either.
    """
    if pattern == "*":
        pattern = "**"
    star, double, one = (".*", ".*", ".") if wide else (r"[^/\s]*", r"\S*", r"[^/\s]")
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(double)
            i += 2
        elif pattern[i] == "*":
            out.append(star)
            i += 1
        elif pattern[i] == "?":
            out.append(one)
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


_OFF_LIMITS_FLAGS = re.IGNORECASE | re.DOTALL
_RUN, _ONE, _LIT = 0, 1, 2


def _tokens(pattern: str, wide: bool) -> tuple[tuple[int, str], ...]:
    """A glob as (kind, arg) tokens: a run or one character of a class (`seg`: not `/` or
    whitespace, `word`: not whitespace, `any`), or a literal (case-folded when `wide`)."""
    if pattern == "*":
        pattern = "**"
    out: list[tuple[int, str]] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append((_RUN, "any" if wide else "word"))
            i += 2
        elif pattern[i] in "*?":
            out.append((_RUN if pattern[i] == "*" else _ONE, "any" if wide else "seg"))
            i += 1
        else:
            out.append((_LIT, pattern[i].casefold() if wide else pattern[i]))
            i += 1
    return tuple(out)


def _in_class(cls: str, c: str) -> bool:
    return cls == "any" or (not c.isspace() and (cls == "word" or c != "/"))


def _simulate(tokens: tuple[tuple[int, str], ...], text: str, nocase: bool) -> bool:
    """Whether the glob matches all of `text`: every position of the glob followed at once, so
    the time is the text's length times the glob's, whatever the text (no backtracking)."""
    end = len(tokens)

    def close(states: set[int]) -> set[int]:  # a run may match nothing: it can be skipped
        out = set()
        for i in states:
            out.add(i)
            while i < end and tokens[i][0] == _RUN:
                i += 1
                out.add(i)
        return out

    states = close({0})
    for c in text:
        key = c.casefold() if nocase else c
        after: set[int] = set()
        for i in states:
            if i == end:
                continue
            kind, arg = tokens[i]
            if kind == _LIT:
                if key == arg:
                    after.add(i + 1)
            elif _in_class(arg, c):
                after.add(i if kind == _RUN else i + 1)
        if not after:
            return False
        states = close(after)
    return end in states


class GlobMatcher:
    """Globs matched as one: `fullmatch(text)` is whether any of them matches all of `text`.

    A backtracking regex with two or more runs (`*`) is polynomial in the text's length: `doc:*:*:*:end`
    took 25 s on a 4 KB name, and a call may carry 64 KB. So globs with at most one run share one
    regular expression (linear), and the others are simulated (`_simulate`), never backtracked.
    """

    __slots__ = ("_regex", "_others", "_wide")

    def __init__(self, globs: Iterable[str], *, wide: bool = False):
        globs = list(globs)
        simple = [g for g in globs if len([t for t in _tokens(g, wide) if t[0] == _RUN]) <= 1]
        self._wide = wide
        self._regex = (re.compile("|".join(f"(?:{glob_to_regex(g, wide=wide)})" for g in simple),
                                  _OFF_LIMITS_FLAGS if wide else 0) if simple else None)
        self._others = tuple(_tokens(g, wide) for g in globs if g not in simple)

    def fullmatch(self, text: str) -> bool:
        if self._regex is not None and self._regex.fullmatch(text) is not None:
            return True
        return any(_simulate(tokens, text, self._wide) for tokens in self._others)


def _glob_covers(q: str, pattern: str) -> bool:
    """Whether glob `q` matches every value glob `pattern` does (sound, not complete).

    Reading `pattern`'s text as a value: if `q` matches it, each wildcard of `pattern` lands inside
    a wildcard of `q` that matches at least as much, except where `q` has a `?` (one character) or
    `pattern` has a `**` (crosses `/`) that `q` lacks.
    """
    if q == pattern or q in ("*", "**"):
        return True
    if "**" in pattern and "**" not in q:
        return False
    if ("*" in pattern or "?" in pattern) and "?" in q:
        return False
    return GlobMatcher([q]).fullmatch(pattern)


# -- values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subject:
    """One touched value, read once per call."""

    kind: Kind
    text: str  # as the call wrote it: names are matched on it, messages quote it
    host: str = ""  # host: the A-label form (IDNA 2008)
    span: tuple[int, int] = (0, -1)  # ip: first and last address (IPv4 as IPv4-mapped IPv6)
    scheme: str = ""  # url: lower case
    port: int | None = None  # url: None when the scheme has no default and none is written
    path: str = ""  # url: normalised, slash look-alikes read as `/`; no query or fragment
    of: Subject | None = None  # url: its host, a `host` or an `ip` subject
    alt: str = ""  # host: the IDNA 2003 spelling when it is another name (`weiß` -> `weiss`), else ""
    alt_path: str = ""  # url: the normalised path with its slash look-alikes kept, when they were any
    machine: Subject | None = None  # name: the host a URL parser reads in it (`localhost:8080`), else None

    def hosts(self) -> tuple[str, ...]:
        """A host's spellings a client may look up: IDNA 2008's, and IDNA 2003's when it differs."""
        return (self.host, self.alt) if self.alt else (self.host,)


def read_value(text: str) -> Subject:
    """Read a touched value; SubjectError when it looks like an address, host or URL and is not one.

    Calls name the same few targets again and again, so short values are read once per process
    (a Subject is immutable; refusals are not cached, and long values would only fill memory)."""
    return _read_cached(text) if len(text) <= 512 else _read_value(text)


def _read_value(text: str) -> Subject:
    folded = fold(text)
    if "://" in folded:
        return _read_url(text, folded, pattern=False)[0]
    if _URL_WITHOUT_SLASHES.match(folded):
        raise SubjectError(f"{_show(text)} reads as a URL to a host; write it scheme://host/path")
    if _IPV6ISH.fullmatch(folded):
        return Subject("ip", text, span=_ip_span(folded, strict=False))
    head = _HEAD_END.split(folded, 1)[0]
    if _ends_in_number(head):
        return Subject("ip", text, span=_ip_span(folded, strict=False))
    if _looks_like_host(head):
        host = normalise_host(folded)
        if _ends_in_number(host):  # an address spelled in other characters: only canonical ones count
            return Subject("ip", text, span=_ip_span(host, strict=False, prefix_ok=False))
        return Subject("host", text, host=host, alt=_host_2003(folded, host))
    return _read_name(text, folded)


_ASCII_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_AUTHORITY_END = re.compile(r"[/\\?#]")
_AN_ESCAPE = re.compile(r"%[0-9A-Fa-f]{2}")
_PORT = re.compile(r"[0-9]*")


def _read_name(text: str, folded: str) -> Subject:
    """A name, unless it holds characters a reader could drop or show otherwise: controls, invisible
    format characters (U+200B, the bidi overrides) or whitespace at either end make
    `customer:vip-1\n` or `customer:vi\u200bp-1` look like a name no off-limits entry matches, while a
    service that trims or ignores them works on `customer:vip-1`. The machine a URL parser would
    find in it comes along (`_machine_in`), for off-limits to weigh."""
    if text != text.strip():
        raise SubjectError(f"{_show(text)}: a name does not start or end with whitespace")
    if _ASCII_CONTROL.search(text) if text.isascii() else any(
            unicodedata.category(c) in ("Cc", "Cf") for c in text):
        raise SubjectError(f"{_show(text)}: control and invisible format characters are refused in a name")
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
    if "%" in authority and _AN_ESCAPE.search(authority):
        decoded = _decoded(authority)
        if _AN_ESCAPE.search(decoded):
            raise SubjectError(f"{_show(text)}: escapes of escapes of escapes are refused where a host could be")
        try:
            plain = _read_value(decoded)
        except SubjectError:
            plain = None
        if plain is None or plain.kind != "name" or plain.machine is not None:
            raise SubjectError(f"{_show(text)}: a host or address spelled with percent-escapes is refused")
        return None
    _, at, hostport = authority.rpartition("@")
    if at and hostport:
        raise SubjectError(f"{_show(text)}: a login before a host (user@host) is refused; a URL parser"
                           " goes to the host after the '@'")
    if hostport.startswith("[") and ":" in hostport:
        raise SubjectError(f"{_show(text)}: an address in brackets is written scheme://[address]/ or bare")
    host_text, colon, port = hostport.partition(":")
    if colon and _PORT.fullmatch(port) is None:
        return None
    try:
        host = normalise_host(host_text)
    except SubjectError:
        return None
    if _ends_in_number(host):
        raise SubjectError(f"{_show(text)}: a URL parser reads {host_text!r} as an address; write the canonical address")
    return Subject("host", host_text, host=host, alt=_host_2003(host_text, host))


_read_cached = functools.lru_cache(maxsize=8192)(_read_value)


def _plain(text: str) -> Subject:
    return Subject("name", text)


_plain_cached = functools.lru_cache(maxsize=8192)(_plain)


def plain_name(text: str) -> Subject:
    """An untyped value (an image, a node) as a name, as written: short ones built once per process,
    like `read_value`'s, since building a Subject costs more than a cache lookup."""
    return _plain_cached(text) if len(text) <= 512 else Subject("name", text)


def _read_url(text: str, folded: str, *, pattern: bool) -> tuple[Subject, bool]:
    """A URL value, or a URL pattern's parts (then the host may start `*.`; returns the wildcard)."""
    if _URL_REFUSED.search(folded):
        raise SubjectError(f"{_show(text)}: whitespace, controls and '\\' are refused in a URL")
    try:
        parts = urlsplit(folded)
    except ValueError as exc:
        raise SubjectError(f"{_show(text)} is not a URL: {exc}") from None
    if not parts.scheme or not parts.netloc:
        raise SubjectError(f"{_show(text)} is not a URL with a scheme and a host")
    if "@" in parts.netloc:  # `https://api.example.com@evil.com/` goes to evil.com
        raise SubjectError(f"{_show(text)}: credentials in a URL (user@host) are refused")
    if pattern and (parts.query or parts.fragment or "?" in folded or "#" in folded):
        raise SubjectError(f"{_show(text)}: a URL pattern names no query or fragment ('?' is not a wildcard here)")
    m = _HOST_PORT.fullmatch(parts.netloc)
    if m is None or not m.group(1):
        raise SubjectError(f"{_show(text)} has no valid host[:port]")
    host_text, port_text = m.group(1), m.group(2)
    wildcard = pattern and host_text.startswith("*.")
    if wildcard:
        host_text = host_text[2:]
    if host_text.startswith("["):
        of = Subject("ip", host_text, span=_ip_span(host_text[1:-1], strict=True, prefix_ok=False))
        if wildcard:
            raise SubjectError(f"{_show(text)}: '*.' goes before a host name, not an address")
    elif _ends_in_number(host_text):
        of = Subject("ip", host_text, span=_ip_span(host_text, strict=True, prefix_ok=False))
    else:
        host = normalise_host(host_text)
        if _ends_in_number(host):
            of = Subject("ip", host_text, span=_ip_span(host, strict=True, prefix_ok=False))
        else:
            of = Subject("host", host_text, host=host, alt=_host_2003(host_text, host))
    port = int(port_text) if port_text else DEFAULT_PORTS.get(parts.scheme)
    if port is not None and port > 65535:
        raise SubjectError(f"{_show(text)}: port {port} is out of range")
    path = normalise_path(parts.path)
    mapped = map_look_alikes(parts.path)
    # a server that maps look-alikes serves `/v1/a∕b` as `/v1/a/b`, one that does not as a segment
    # `a∕b`: both readings are kept, scope admits the path when both are inside, off-limits refuses either
    alt_path, path = (path, normalise_path(mapped)) if mapped != parts.path else ("", path)
    url = Subject("url", text, scheme=parts.scheme, port=port, path=path, of=of, alt_path=alt_path)
    return url, wildcard


# -- entries ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pattern:
    """One scope or off-limits entry, compiled at load."""

    kind: Kind | Literal["any"]
    text: str  # as the policy wrote it
    host: str = ""  # host: the A-label form, without a leading `*.`
    wildcard: bool = False  # host: `*.` = any subdomain, not the name itself
    span: tuple[int, int] = (0, -1)  # ip
    scheme: str = ""  # url
    port: int | None = None  # url
    glob: str = ""  # name: the glob; url: the normalised path glob
    of: Pattern | None = None  # url: its host pattern
    alt: str = ""  # host: the IDNA 2003 spelling when it is another name, else ""
    # the glob compiled, exact (scope) and ignoring case (off-limits); built here, once per load
    regex: GlobMatcher | None = field(default=None, init=False, compare=False)
    iregex: GlobMatcher | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        if self.glob:
            object.__setattr__(self, "regex", GlobMatcher([self.glob]))
            object.__setattr__(self, "iregex", GlobMatcher([self.glob], wide=True))

    def matches(self, s: Subject, *, off_limits: bool = False) -> bool:
        """Scope semantics, or with `off_limits` the wider reading of a deny list: a host covers
        its subdomains, a range refuses any overlap (a wider target that includes an off-limits
        host is refused), names and URL paths ignore case."""
        if self.kind == "any":
            return True
        if self.kind != s.kind:
            return False
        if self.kind == "host":
            # a spelling of the value against a spelling of the entry (IDNA 2008 and 2003): scope
            # admits a value when every spelling is inside, off-limits refuses it when any is
            mine = (self.host, self.alt) if self.alt else (self.host,)
            if off_limits:
                return any(self._host_matches(p, h, True) for p in mine for h in s.hosts())
            return all(any(self._host_matches(p, h, False) for p in mine) for h in s.hosts())
        if self.kind == "ip":
            (low, high), (lo, hi) = self.span, s.span
            return (lo <= high and low <= hi) if off_limits else (low <= lo and hi <= high)
        if self.kind == "url":
            assert self.of is not None and s.of is not None
            if not (self.scheme == s.scheme and self.port == s.port and self.of.matches(s.of, off_limits=off_limits)):
                return False
            if not off_limits:
                return self._glob_matches(s.path, False) and (not s.alt_path or self._glob_matches(s.alt_path, False))
            # a server that merges slashes serves `//admin/x` as `/admin/x`
            return any(self._glob_matches(path, True) or ("//" in path and self._glob_matches(_SLASHES.sub("/", path), True))
                       for path in ((s.path, s.alt_path) if s.alt_path else (s.path,)))
        return self._glob_matches(s.text, off_limits)

    def _host_matches(self, entry: str, host: str, off_limits: bool) -> bool:
        if self.wildcard or (off_limits and host != entry):
            return host.endswith("." + entry)
        return host == entry

    def _glob_matches(self, text: str, off_limits: bool) -> bool:
        if not off_limits:
            return self.regex is not None and self.regex.fullmatch(text)
        # off-limits: the text as written or folded (`customer:ｖip-1` is `customer:vip-1`)
        return self.iregex is not None and any(self.iregex.fullmatch(t) for t in _as_written_and_folded(text))

    def covers(self, other: Pattern) -> bool:
        """Whether this entry matches every value `other` matches, in scope semantics (sound, not complete)."""
        if self.kind == "any":
            return True
        if self.kind != other.kind:
            return False
        if self.kind == "host":
            mine = (self.host, self.alt) if self.alt else (self.host,)
            theirs = (other.host, other.alt) if other.alt else (other.host,)
            if not self.wildcard:
                return not other.wildcard and all(h in mine for h in theirs)
            return all(any(h.endswith("." + p) or (other.wildcard and h == p) for p in mine) for h in theirs)
        if self.kind == "ip":
            return self.span[0] <= other.span[0] and other.span[1] <= self.span[1]
        if self.kind == "url":
            assert self.of is not None and other.of is not None
            return (self.scheme == other.scheme and self.port == other.port and self.of.covers(other.of)
                    and _glob_covers(self.glob, other.glob))
        return _glob_covers(self.glob, other.glob)


ANY = Pattern("any", "*")


def read_pattern(text: str, kind: str | None = None, *, typed: bool = True) -> Pattern:
    """Compile one entry. `typed=False` (images, nodes) reads every entry as a name glob.
    `kind`, when the policy gives one, must be what the text reads as."""
    if text in ("*", "**"):
        found = ANY
    else:
        found = _read_pattern(text) if typed else Pattern("name", text, glob=text)
    if kind is not None and kind != found.kind:
        if kind not in KINDS:
            raise SubjectError(f"unknown type {kind!r}; expected one of: {', '.join(KINDS)}")
        raise SubjectError(f"{_show(text)} reads as type {found.kind}, not {kind}")
    return found


def _read_pattern(text: str) -> Pattern:
    folded = fold(text)
    if "://" in folded:
        url, wildcard = _read_url(text, folded, pattern=True)
        assert url.of is not None
        of = (Pattern("ip", url.of.text, span=url.of.span) if url.of.kind == "ip"
              else Pattern("host", url.of.text, host=url.of.host, wildcard=wildcard, alt=url.of.alt))
        return Pattern("url", text, scheme=url.scheme, port=url.port, glob=url.path, of=of)
    if _IPV6ISH.fullmatch(folded):
        return Pattern("ip", text, span=_ip_span(folded, strict=True))
    legacy = _LEGACY_V4.fullmatch(folded)
    if legacy is not None:  # `10.20.0.*` is 10.20.0.0/24: an address pattern, never a host
        octets = legacy.group(1).rstrip(".").split(".")
        cidr = ".".join(octets + ["0"] * (4 - len(octets))) + f"/{8 * len(octets)}"
        return Pattern("ip", text, span=_ip_span(cidr, strict=True))
    head = _HEAD_END.split(folded, 1)[0]
    if _ends_in_number(head):
        return Pattern("ip", text, span=_ip_span(folded, strict=True))
    if _looks_like_host(head):
        wildcard = folded.startswith("*.")
        rest = folded[2:] if wildcard else folded
        if "*" in rest or "?" in rest:
            raise SubjectError(f"{_show(text)}: a host pattern's only wildcard is a leading '*.'")
        host = normalise_host(rest)
        if _ends_in_number(host):
            raise SubjectError(f"{_show(text)} is an address spelled as a host; write the canonical address")
        return Pattern("host", text, host=host, wildcard=wildcard, alt=_host_2003(rest, host))
    return Pattern("name", text, glob=text)


# -- sets ---------------------------------------------------------------------------------


def _parents(host: str) -> Iterator[str]:
    """`a.b.c` -> `b.c`, `c`."""
    i = host.find(".")
    while i != -1:
        yield host[i + 1:]
        i = host.find(".", i + 1)


class SubjectSet:
    """One scope dimension's entries: is a value inside?

    Hosts are looked up by their parent names (a few dict probes, however long the list); names
    share one regular expression; ranges and URLs are few and tried in turn.
    """

    __slots__ = ("patterns", "_any", "_hosts", "_subdomains_of", "_others", "_names")

    def __init__(self, patterns: Iterable[Pattern]):
        self.patterns = tuple(patterns)
        self._any = any(p.kind == "any" for p in self.patterns)
        hosts = [p for p in self.patterns if p.kind == "host"]
        self._hosts = frozenset(h for p in hosts if not p.wildcard for h in (p.host, p.alt) if h)
        self._subdomains_of = frozenset(h for p in hosts if p.wildcard for h in (p.host, p.alt) if h)
        self._others = tuple(p for p in self.patterns if p.kind in ("ip", "url"))
        globs = [p.glob for p in self.patterns if p.kind == "name"]
        self._names = GlobMatcher(globs) if globs else None

    @classmethod
    def lenient(cls, texts: Iterable[str], *, typed: bool) -> SubjectSet:
        """Entries that do not compile match nothing: for catalog versions stored before a rule
        changed and for narrowings in a request, where refusing more is the safe way to be wrong."""
        patterns = []
        for text in texts:
            try:
                patterns.append(read_pattern(text, typed=typed))
            except SubjectError:
                continue
        return cls(patterns)

    def matches(self, s: Subject) -> bool:
        if self._any:
            return True
        if s.kind == "host":  # every spelling a client may look up is inside
            if not s.alt:
                return s.host in self._hosts or any(p in self._subdomains_of for p in _parents(s.host))
            return all(h in self._hosts or any(p in self._subdomains_of for p in _parents(h)) for h in s.hosts())
        if s.kind == "name":
            return self._names is not None and self._names.fullmatch(s.text)
        return any(p.matches(s) for p in self._others)

    def covers(self, pattern: Pattern) -> bool:
        return any(q.covers(pattern) for q in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)


class OffLimits:
    """The off-limits entries of every OffLimits document, with their reasons.

    Off-limits reads wider than scope: a host covers its subdomains, a range refuses any target
    range that overlaps it, names ignore case, and a URL is refused when its host is off-limits.
    A name entry that holds no dot (`localhost`, `intranet-*`) is also the single-label host of
    that name: `localhost.`, `x.localhost` and `http://localhost/` read as hosts, not names.
    """

    __slots__ = ("entries", "_any", "_hosts", "_subdomains_of", "_others", "_names", "_label_entries", "_labels")

    def __init__(self, entries: Iterable[tuple[Pattern, str]]):
        self.entries = tuple(entries)
        self._any = next((r for p, r in self.entries if p.kind == "any"), None)
        self._hosts: dict[str, str] = {}
        self._subdomains_of: dict[str, str] = {}
        for p, reason in self.entries:
            if p.kind == "host":  # under each of its spellings: `weiß.example` also refuses `weiss.example`
                for host in (p.host, p.alt) if p.alt else (p.host,):
                    (self._subdomains_of if p.wildcard else self._hosts).setdefault(host, reason)
            elif p.kind == "name":
                for host in _as_host(p.glob):
                    self._hosts.setdefault(host, reason)  # `bücher` refuses `xn--bcher-kva.` too
        # dotless name entries are also single-label hosts: only they can match a host's last label
        self._label_entries = tuple((p, r) for p, r in self.entries if p.kind == "name" and "." not in p.glob)
        self._labels = GlobMatcher([p.glob for p, _ in self._label_entries], wide=True) if self._label_entries else None
        self._others = tuple((p, r) for p, r in self.entries if p.kind in ("ip", "url", "name"))
        globs = [p.glob for p, _ in self.entries if p.kind == "name"]
        # one pass says "no" for most names; the entry (for its reason) is looked for only on a hit
        self._names = GlobMatcher(globs, wide=True) if globs else None

    def __len__(self) -> int:
        return len(self.entries)

    def reason(self, s: Subject) -> str | None:
        """Why `s` is off-limits, or None."""
        if self._any is not None:
            return self._any
        if s.kind == "host":  # any spelling a client may look up
            if not s.alt:
                return self._host_reason(s.host)
            for host in s.hosts():
                found = self._host_reason(host)
                if found is not None:
                    return found
            return None
        if s.kind == "name":
            if s.machine is not None and (found := self.reason(s.machine)) is not None:
                return found  # `localhost:8080` is the host localhost
            if self._names is None or not any(self._names.fullmatch(t) for t in _as_written_and_folded(s.text)):
                return None
        for p, reason in self._others:
            if p.matches(s, off_limits=True):
                return reason
        if s.kind == "ip":
            carried = tuple(_embedded_v4(s.span))
            for span in (*carried, *_this_host(s.span), *(h for c in carried for h in _this_host(c))):
                for p, reason in self._others:
                    if p.kind == "ip" and span[0] <= p.span[1] and p.span[0] <= span[1]:
                        return reason
        if s.kind == "url":
            assert s.of is not None
            return self.reason(s.of)
        return None

    def _host_reason(self, host: str) -> str | None:
        found = self._hosts.get(host)
        for parent in _parents(host):
            if found is not None:
                break
            found = self._hosts.get(parent) or self._subdomains_of.get(parent)
        return found if found is not None else self._name_of_host(host)

    def _name_of_host(self, host: str) -> str | None:
        """The reason of a dotless name glob matching the host's last label (`intranet-*` refuses
        `intranet-wiki` and `a.intranet-wiki`, not `intranet-wiki.example.com`), or None."""
        if self._labels is None:
            return None
        label = host.rsplit(".", 1)[-1]
        if not self._labels.fullmatch(label):
            return None
        return next(r for p, r in self._label_entries if p.iregex and p.iregex.fullmatch(label))


# IPv6 blocks that carry an IPv4 address a translator or tunnel delivers to (base, size, shift of
# the IPv4 bits): IPv4-translated ::ffff:0:0:0/96 (SIIT), the NAT64 well-known prefix
# 64:ff9b::/96 (RFC 6052) and 6to4 2002::/16 (RFC 3056, bits 16-47). IPv4-compatible ::/96 is
# deprecated and routed nowhere: another address.
_V4_CARRIERS = ((0xFFFF << 48, 1 << 32, 0), (0x64FF9B << 96, 1 << 32, 0), (0x2002 << 112, 1 << 112, 80))


def _embedded_v4(span: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """The IPv4 addresses (as IPv4-mapped spans) an IPv6 value or range reaches through a carrier
    block: off-limits `10.9.9.9` also refuses `64:ff9b::10.9.9.9` and `2002:a09:909::1`."""
    low, high = span
    for base, size, shift in _V4_CARRIERS:
        lo, hi = max(low, base), min(high, base + size - 1)
        if lo <= hi:
            yield _V4_MAPPED + ((lo - base) >> shift), _V4_MAPPED + ((hi - base) >> shift)


# Addresses that reach this host whatever its interfaces: IPv4 loopback 127.0.0.0/8, IPv6 loopback
# ::1, and the unspecified 0.0.0.0 and ::, which Linux connects to the local host.
_THIS_HOST = ((_V4_MAPPED + (127 << 24), _V4_MAPPED + (128 << 24) - 1), (1, 1), (_V4_MAPPED, _V4_MAPPED), (0, 0))


def _this_host(span: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """Every spelling of this host when a value or range holds one: off-limits `127.0.0.0/8` also
    refuses `0.0.0.0`, `::` and `::1`, and off-limits `::1` refuses `127.0.0.1`."""
    if any(span[0] <= high and low <= span[1] for low, high in _THIS_HOST):
        yield from _THIS_HOST


def _as_written_and_folded(text: str) -> tuple[str, ...]:
    """The text, its folded form when that differs (ASCII text folds to itself: one pass), and,
    when it holds percent-escapes, the folded form of it decoded: a service that decodes the value
    works on `customer:vip-1` when the call wrote `customer:vip%2D1`."""
    folded = fold(text)
    forms: tuple[str, ...] = (text,) if folded == text else (text, folded)
    if "%" in text and _AN_ESCAPE.search(text):
        forms += (fold(_decoded(text)),)
    return forms


def _decoded(text: str) -> str:
    """`text` with its percent-escapes decoded until none is left, at most four times (`%252D` is
    `%2D` to a first decoder and `-` to a second)."""
    for _ in range(4):
        text = unquote(text)
        if not _AN_ESCAPE.search(text):
            break
    return text


def _as_host(glob: str) -> tuple[str, ...]:
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
    if _ends_in_number(host):
        return ()
    alt = _host_2003(folded, host)
    return (host, alt) if alt else (host,)
