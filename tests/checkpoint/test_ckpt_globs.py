"""Scope globs: `*` stays inside a segment, `**` crosses `/`, a lone `*` means anything."""

from __future__ import annotations

import pytest

from checkpoint.engine.authority import _covered
from checkpoint.policy.policyset import PatternSet


@pytest.mark.parametrize(
    "pattern, value, matches",
    [
        ("10.20.0.*", "10.20.0.7", True),
        ("10.20.0.*", "10.20.0.0/8", False),  # a wider range is not an address in the /24
        ("*.lab.example.com", "www.lab.example.com", True),
        ("*.lab.example.com", "a.b.lab.example.com", True),
        ("*.lab.example.com", "evil.example.org .lab.example.com", False),  # no whitespace
        ("*.lab.example.com", "lab.example.com", False),
        ("recon/nmap:*", "recon/nmap:7.94", True),
        ("recon/nmap:*", "recon/nmap:7.94/../../x", False),
        ("https://api.example.com/*", "https://api.example.com/v1", True),
        ("https://api.example.com/*", "https://api.example.com/v1/users", False),
        ("https://api.example.com/**", "https://api.example.com/v1/users", True),
        ("*", "img/a", True),  # the written-out "anything"
        ("customer:vip-?", "customer:vip-1", True),
        ("customer:vip-?", "customer:vip-12", False),
        ("a[b]", "a[b]", True),  # no character classes: brackets are literal
        ("a[b]", "ab", False),
    ],
)
def test_glob_semantics(pattern, value, matches):
    assert PatternSet([pattern]).matches(value) is matches


@pytest.mark.parametrize(
    "pattern, level, covered",
    [
        ("*.lab.example.com", ("*.example.com",), True),
        ("*.example.com", ("*.lab.example.com",), False),
        ("doc:public-*", ("doc:*",), True),
        ("doc:*", ("doc:public-*",), False),
        ("https://x/**", ("https://x/*",), False),  # ** crosses '/', * does not
        ("a-*", ("a-?",), False),  # one character cannot cover many
        ("anything", ("*",), True),
    ],
)
def test_reported_child_scope_never_claims_more_than_a_level_allows(pattern, level, covered):
    assert _covered(pattern, level) is covered
