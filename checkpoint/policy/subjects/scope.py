"""One scope dimension's entries, and whether a value is inside them."""

from __future__ import annotations

from collections.abc import Iterable

from checkpoint.policy.subjects.errors import SubjectError
from checkpoint.policy.subjects.globs import GlobMatcher
from checkpoint.policy.subjects.hosts import parents
from checkpoint.policy.subjects.patterns import Pattern, read_pattern
from checkpoint.policy.subjects.subject import Subject


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
                return s.host in self._hosts or any(p in self._subdomains_of for p in parents(s.host))
            return all(h in self._hosts or any(p in self._subdomains_of for p in parents(h)) for h in s.hosts())
        if s.kind == "name":
            return self._names is not None and self._names.fullmatch(s.text)
        return any(p.matches(s) for p in self._others)

    def covers(self, pattern: Pattern) -> bool:
        return any(q.covers(pattern) for q in self.patterns)

    def __bool__(self) -> bool:
        return bool(self.patterns)
