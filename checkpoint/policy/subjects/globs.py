"""Globs for names, URL paths and the untyped dimensions: matched in time linear in the text,
and compared (does one glob match every value another does)."""

from __future__ import annotations

import re
from collections.abc import Iterable


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


def glob_covers(q: str, pattern: str) -> bool:
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
