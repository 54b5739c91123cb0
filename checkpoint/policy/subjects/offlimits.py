"""The off-limits entries of every OffLimits document, and why a value is off-limits."""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint.policy.subjects.addresses import embedded_v4, this_host
from checkpoint.policy.subjects.folding import as_written_and_folded
from checkpoint.policy.subjects.globs import GlobMatcher
from checkpoint.policy.subjects.hosts import as_host, parents
from checkpoint.policy.subjects.patterns import Pattern
from checkpoint.policy.subjects.subject import Subject


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
                for host in as_host(p.glob):
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
            if self._names is None or not any(self._names.fullmatch(t) for t in as_written_and_folded(s.text)):
                return None
        for p, reason in self._others:
            if p.matches(s, off_limits=True):
                return reason
        if s.kind == "ip":
            carried = tuple(embedded_v4(s.span))
            for span in (*carried, *this_host(s.span), *(h for c in carried for h in this_host(c))):
                for p, reason in self._others:
                    if p.kind == "ip" and span[0] <= p.span[1] and p.span[0] <= span[1]:
                        return reason
        if s.kind == "url":
            assert s.of is not None
            return self.reason(s.of)
        return None

    def _host_reason(self, host: str) -> str | None:
        found = self._hosts.get(host)
        for parent in parents(host):
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
