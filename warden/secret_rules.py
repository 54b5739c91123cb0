"""Credential shapes from a maintained rule set: gitleaks' default rules, vendored unchanged as
data (warden/data/gitleaks.toml, MIT licence beside it), so new token formats come with an update
of that file instead of a hand-written list.

Each rule is read as gitleaks reads it: its regex (Go's RE2 syntax, which the `regex` module's V1
mode reads alike: an inline `(?i)` holds to the end of its group), the secret being `secretGroup`
or else the first capture group that matched, a find counting only when the secret's Shannon
entropy is above the rule's `entropy`, and the rule's and the file's allowlists (their regexes,
against the secret, the whole match or the line as `regexTarget` says, and their stopwords) taking
it back. A rule is tried only on text holding one of its keywords (any letter case), as gitleaks
does: one pass over the text finds which keywords are there.

Left out: rules that look at file paths only (they read no text), and `generic-api-key`, a name=value
reading that warden/scrub.py's assignment layers already make, with their own limits for ordinary
output.
"""

from __future__ import annotations

import functools
import math
import tomllib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

RULES_FILE = Path(__file__).with_name("data") / "gitleaks.toml"
LEFT_OUT = frozenset({"generic-api-key"})


def shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character distribution (gitleaks' measure, and the
    scrubber's for a name=value assignment)."""
    if not value:
        return 0.0
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


@dataclass(frozen=True)
class _Allow:
    """One allowlist: a find it matches is not a secret."""

    regexes: tuple[regex.Pattern[str], ...]
    target: str  # "secret" (gitleaks' default), "match" or "line"
    stopwords: tuple[str, ...]
    needs_path: bool  # an AND allowlist with path conditions: never satisfied on output text

    def allows(self, secret: str, match: str, line: str) -> bool:
        if self.needs_path:
            return False
        text = {"match": match, "line": line}.get(self.target, secret)
        if any(r.search(text) for r in self.regexes):
            return True
        lowered = secret.lower()
        return any(word in lowered for word in self.stopwords)


@dataclass(frozen=True)
class Rule:
    id: str
    pattern: regex.Pattern[str]
    group: int  # secretGroup; 0: the first capture group that matched, or the whole match
    entropy: float
    keywords: tuple[str, ...]
    allow: tuple[_Allow, ...]


@dataclass(frozen=True)
class Find:
    label: str
    start: int  # the secret's span, masked
    end: int
    match_start: int  # where the text that makes it a find begins (a stream holds it back too)


def _allowlist(spec: dict[str, Any]) -> _Allow:
    return _Allow(
        regexes=tuple(regex.compile(r, regex.V1) for r in spec.get("regexes", ())),
        target=spec.get("regexTarget") or "secret",
        stopwords=tuple(w.lower() for w in spec.get("stopwords", ())),
        needs_path=bool(spec.get("paths")) and spec.get("condition") == "AND",
    )


class RuleSet:
    """The rules of one gitleaks configuration, compiled. Immutable; safe to share between threads."""

    def __init__(self, config: dict[str, Any], left_out: frozenset[str] = LEFT_OUT) -> None:
        shared = config.get("allowlist")
        self._shared = (_allowlist(shared),) if shared else ()
        rules: list[Rule] = []
        for spec in config.get("rules", ()):
            if "regex" not in spec or spec["id"] in left_out:
                continue
            rules.append(Rule(
                id=spec["id"],
                pattern=regex.compile(_without_lead(spec["regex"]), regex.V1),
                group=int(spec.get("secretGroup", 0)),
                entropy=float(spec.get("entropy", 0.0)),
                keywords=tuple(k.lower() for k in spec.get("keywords", ())),
                allow=tuple(_allowlist(a) for a in spec.get("allowlists", ())),
            ))
        self.rules: tuple[Rule, ...] = tuple(rules)
        self._keywords = tuple(sorted({k for rule in rules for k in rule.keywords}))
        self._automaton = _automaton(self._keywords)

    def finds(self, text: str) -> Iterator[Find]:
        lowered = text.lower()
        if self._automaton is not None:  # every keyword in one linear pass
            present = set(self._automaton.find_matches_as_strings(lowered, overlapping=True))
        else:  # one substring search per keyword: ~100 times slower on a large output, same answer
            present = {k for k in self._keywords if k in lowered}
        for rule in self.rules:
            if rule.keywords and not any(k in present for k in rule.keywords):
                continue
            for m in rule.pattern.finditer(text):
                start, end = _secret_span(m, rule.group)
                if end <= start:
                    continue
                secret = text[start:end]
                if rule.entropy and shannon_entropy(secret) <= rule.entropy:
                    continue
                line = _line_of(text, m.start(), m.end())
                if any(a.allows(secret, m.group(0), line) for a in (*rule.allow, *self._shared)):
                    continue
                yield Find(rule.id, start, end, m.start())


# `[\w.-]{0,50}?` at a rule's start (or at the start of its leading case group) only stretches the
# match back over the name before a keyword; the secret is the same without it. Kept, it makes each
# position of the text cost up to 50 (nested: 2,500) steps in a backtracking engine (gitleaks' RE2
# is linear): one keyword in a tool's output made a 1 MB scan take minutes.
_LEAD = regex.compile(r"^((?:\(\?i\)|\(\?i:)?)\[\\w\.-\]\{0,\d+\}\?")


def _without_lead(pattern: str) -> str:
    while (m := _LEAD.match(pattern)) is not None:
        pattern = m.group(1) + pattern[m.end():]
    return pattern


def _automaton(keywords: tuple[str, ...]) -> Any:
    """An Aho-Corasick automaton of the keywords (ahocorasick-rs), or None where it is not installed."""
    try:
        import ahocorasick_rs
    except ImportError:
        return None
    return ahocorasick_rs.AhoCorasick(list(keywords)) if keywords else None


def _secret_span(m: regex.Match[str], group: int) -> tuple[int, int]:
    if group and group <= (m.re.groups or 0):
        return m.span(group)
    for i in range(1, (m.re.groups or 0) + 1):
        if m.group(i):
            return m.span(i)
    return m.span()


def _line_of(text: str, start: int, end: int) -> str:
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return text[first: len(text) if last < 0 else last]


def load(path: Path = RULES_FILE, left_out: Sequence[str] = tuple(LEFT_OUT)) -> RuleSet:
    with path.open("rb") as f:
        return RuleSet(tomllib.load(f), frozenset(left_out))


@functools.cache
def gitleaks() -> RuleSet:
    """The vendored rule set, read and compiled once per process, at its first use."""
    return load()
