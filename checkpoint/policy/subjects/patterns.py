"""Scope and off-limits entries, compiled once per load, and how one matches or covers a value."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from checkpoint.policy.subjects.addresses import IPV6ISH, LEGACY_V4, ip_span
from checkpoint.policy.subjects.errors import KINDS, Kind, SubjectError, show
from checkpoint.policy.subjects.folding import as_written_and_folded, fold
from checkpoint.policy.subjects.globs import GlobMatcher, glob_covers
from checkpoint.policy.subjects.hosts import (
    HEAD_END,
    ends_in_number,
    host_2003,
    looks_like_host,
    normalise_host,
)
from checkpoint.policy.subjects.paths import SLASHES
from checkpoint.policy.subjects.subject import Subject
from checkpoint.policy.subjects.urls import read_url


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
            return any(self._glob_matches(path, True) or ("//" in path and self._glob_matches(SLASHES.sub("/", path), True))
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
        return self.iregex is not None and any(self.iregex.fullmatch(t) for t in as_written_and_folded(text))

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
                    and glob_covers(self.glob, other.glob))
        return glob_covers(self.glob, other.glob)


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
        raise SubjectError(f"{show(text)} reads as type {found.kind}, not {kind}")
    return found


def _read_pattern(text: str) -> Pattern:
    folded = fold(text)
    if "://" in folded:
        url, wildcard = read_url(text, folded, pattern=True)
        assert url.of is not None
        of = (Pattern("ip", url.of.text, span=url.of.span) if url.of.kind == "ip"
              else Pattern("host", url.of.text, host=url.of.host, wildcard=wildcard, alt=url.of.alt))
        return Pattern("url", text, scheme=url.scheme, port=url.port, glob=url.path, of=of)
    if IPV6ISH.fullmatch(folded):
        return Pattern("ip", text, span=ip_span(folded, strict=True))
    legacy = LEGACY_V4.fullmatch(folded)
    if legacy is not None:  # `10.20.0.*` is 10.20.0.0/24: an address pattern, never a host
        octets = legacy.group(1).rstrip(".").split(".")
        cidr = ".".join(octets + ["0"] * (4 - len(octets))) + f"/{8 * len(octets)}"
        return Pattern("ip", text, span=ip_span(cidr, strict=True))
    head = HEAD_END.split(folded, 1)[0]
    if ends_in_number(head):
        return Pattern("ip", text, span=ip_span(folded, strict=True))
    if looks_like_host(head):
        wildcard = folded.startswith("*.")
        rest = folded[2:] if wildcard else folded
        if "*" in rest or "?" in rest:
            raise SubjectError(f"{show(text)}: a host pattern's only wildcard is a leading '*.'")
        host = normalise_host(rest)
        if ends_in_number(host):
            raise SubjectError(f"{show(text)} is an address spelled as a host; write the canonical address")
        return Pattern("host", text, host=host, wildcard=wildcard, alt=host_2003(rest, host))
    return Pattern("name", text, glob=text)
