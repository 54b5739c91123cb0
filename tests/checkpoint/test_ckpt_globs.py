"""Scope entries: globs for images and nodes (`*` stays inside a segment, `**` crosses `/`, a lone
`*` means anything), typed patterns for subjects and connections (tests/security has the attacks)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpoint.engine.authority import _covered
from checkpoint.policy.policyset import TYPED_DIMENSIONS, read_touched
from checkpoint.policy.subjects import (
    OffLimits,
    SubjectError,
    SubjectSet,
    glob_to_regex,
    read_pattern,
)
from checkpoint.policy.subjects.globs import _simulate, _tokens


def _matches(dim: str, pattern: str, value: str) -> bool | str:
    entries = SubjectSet([read_pattern(pattern, typed=dim in TYPED_DIMENSIONS)])
    try:
        return entries.matches(read_touched(dim, value))
    except SubjectError:
        return "invalid"


@pytest.mark.parametrize(
    "dim, pattern, value, matches",
    [
        ("subjects", "10.20.0.*", "10.20.0.7", True),
        ("subjects", "10.20.0.*", "10.20.0.0/8", False),  # a wider range is not inside the /24
        ("subjects", "10.20.0.*", "10.20.0.evil.com", False),  # an address pattern never matches a host
        ("subjects", "*.lab.example.com", "www.lab.example.com", True),
        ("subjects", "*.lab.example.com", "a.b.lab.example.com", True),
        ("subjects", "*.lab.example.com", "evil.example.org .lab.example.com", "invalid"),  # not a host
        ("subjects", "*.lab.example.com", "lab.example.com", False),
        ("images", "recon/nmap:*", "recon/nmap:7.94", True),
        ("images", "recon/nmap:*", "recon/nmap:7.94/../../x", False),
        ("connections", "https://api.example.com/*", "https://api.example.com/v1", True),
        ("connections", "https://api.example.com/*", "https://api.example.com/v1/users", False),
        ("connections", "https://api.example.com/**", "https://api.example.com/v1/users", True),
        ("images", "*", "img/a", True),  # the written-out "anything"
        ("subjects", "customer:vip-?", "customer:vip-1", True),
        ("subjects", "customer:vip-?", "customer:vip-12", False),
        ("subjects", "a[b]", "a[b]", True),  # no character classes: brackets are literal
        ("subjects", "a[b]", "ab", False),
    ],
)
def test_scope_semantics(dim, pattern, value, matches):
    assert _matches(dim, pattern, value) == matches


@pytest.mark.parametrize(
    "dim, pattern, level, covered",
    [
        ("subjects", "*.lab.example.com", ("*.example.com",), True),
        ("subjects", "*.example.com", ("*.lab.example.com",), False),
        ("subjects", "www.example.com", ("*.example.com",), True),
        ("subjects", "example.com", ("*.example.com",), False),  # `*.` is subdomains only
        ("subjects", "10.20.0.0/25", ("10.20.0.*",), True),
        ("subjects", "10.20.0.0/23", ("10.20.0.0/24",), False),
        ("subjects", "10.20.0.*", ("*.lab.example.com",), False),  # an address is never a host
        ("subjects", "doc:public-*", ("doc:*",), True),
        ("subjects", "doc:*", ("doc:public-*",), False),
        ("connections", "https://x/**", ("https://x/*",), False),  # ** crosses '/', * does not
        ("connections", "https://a.x/v1/*", ("https://*.x/**",), True),
        ("connections", "http://a.x/v1/*", ("https://*.x/**",), False),  # another scheme
        ("subjects", "a-*", ("a-?",), False),  # one character cannot cover many
        ("subjects", "anything", ("*",), True),
        ("subjects", "10.9.2313", ("*",), False),  # an entry that does not compile is never reported
    ],
)
def test_reported_child_scope_never_claims_more_than_a_level_allows(dim, pattern, level, covered):
    assert _covered(dim, pattern, level) is covered


# -- globs with several runs are matched without backtracking ------------------------------------

GLOB_CHARS = st.sampled_from(["*", "**", "?", "a", "b", ":", "/", " ", "-", "K", "k"])
TEXT_CHARS = st.sampled_from(["a", "b", ":", "/", " ", "-", "\n", "K", "k", "\u212a"])  # U+212A Kelvin


@settings(max_examples=400, deadline=None)
@given(glob=st.lists(GLOB_CHARS, min_size=1, max_size=8).map("".join),
       text=st.lists(TEXT_CHARS, max_size=12).map("".join), wide=st.booleans())
def test_the_simulated_glob_agrees_with_the_regex(glob, text, wide):
    # GlobMatcher simulates globs with two or more runs; a single-glob regex is the reference
    regex = re.compile(glob_to_regex(glob, wide=wide), (re.IGNORECASE | re.DOTALL) if wide else 0)
    assert _simulate(_tokens(glob, wide), text, wide) == (regex.fullmatch(text) is not None), (glob, text, wide)


def test_a_long_value_against_a_glob_with_several_runs_is_decided():
    # The regex for `doc:*:*:*:end` backtracked polynomially: a 4 KB value took 25 s, 64 KB would
    # hold a checkpoint thread for hours. Now the time is linear in the value.
    value = read_touched("subjects", "doc:" + "-:" * 30_000)
    for glob in ("doc:*:*:*:end", "doc:**-**-**-end"):
        assert SubjectSet([read_pattern(glob)]).matches(value) is False
        assert OffLimits([(read_pattern(glob), "r")]).reason(value) is None
    assert OffLimits([(read_pattern("doc:*:*:*:-"), "r")]).reason(read_touched("subjects", "doc:" + "-:" * 30_000 + "-")) == "r"
