"""Text that a client reads as a machine is that machine, whatever else it looks like.

A URL parser (curl, node's WHATWG URL, CPython's resolver) takes `u:p@127.0.0.1`, `localhost:8080`,
`localhost/x`, `payments%2elab%2eexample%2ecom` and `local<U+FE0F>host` to a machine, while the
reader took each for a name that no off-limits host or address entry is compared with. And IDNA
2003 (CPython's `idna` codec, the resolver's) spells `ß`, `ς`, ZWJ and ZWNJ otherwise than IDNA
2008 does, so a host has two spellings a client may look up. Every test goes through decide():
a person (no scope), `prober` (scope `*`) and `refunder` (scope `customer:*`).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from .policies import ALLOWED, INVALID, OFF_LIMITS, OUT_OF_SCOPE, probe

REFUSED = (OFF_LIMITS, INVALID)
CALLERS = ((), ("prober",))


def refused_for_everyone(value: str) -> None:
    for chain in CALLERS:
        assert probe(value, chain) in REFUSED, (value, chain, probe(value, chain))
    assert probe(value, ("refunder",)) in (*REFUSED, OUT_OF_SCOPE), value


# -- item: a machine written as a name ---------------------------------------------------------


@pytest.mark.parametrize("value", [
    "u:p@127.0.0.1", "u:p@payments.lab.example.com", "customer:x@127.0.0.1", "customer:x@localhost",
    "customer:x@10.9.9.9:22", "u:@www.irs.gov/x", "a:b@c@10.99.1.1", "u:p＠127.0.0.1",
])
def test_userinfo_before_a_machine_is_refused(value):
    # each was ALLOWED to a person and to `prober`; `customer:x@127.0.0.1` also to `refunder`
    refused_for_everyone(value)
    assert probe(value, ("refunder",)) != ALLOWED


@pytest.mark.parametrize("value", [
    "payments%2elab%2eexample%2ecom", "127%2e0%2e0%2e1", "localhost%3a8080", "%6cocalhost:80",
    "www%2eirs%2egov/x", "127%252e0%252e0%252e1",
])
def test_percent_escaped_host_is_refused(value):
    refused_for_everyone(value)


@pytest.mark.parametrize("value", [
    "localhost:8080", "LOCALHOST:1", "localhost:", "localhost/x", "localhost?x", "localhost#x",
    "localhost\\x", "db-main:5432", "DB-MAIN:5432/x", "ｌｏｃａｌｈｏｓｔ：８０", "intranet-ＨＲ:80",
])
def test_a_single_label_host_with_a_port_or_a_path_is_that_host(value):
    refused_for_everyone(value)


@pytest.mark.parametrize("value", [
    "local\ufe0fhost", "local\ufe0fhost:80", "local\u034fhost:80", "db\u180b-main", "localhost\U000e0041:80",
    "local\u3164host:80", "lo\u00adcalhost", "payments.lab.exam\ufe0fple.com",
])
def test_default_ignorable_code_points_are_not_part_of_the_text(value):
    refused_for_everyone(value)


@pytest.mark.parametrize("value", ["[::1]:80", "[::ffff:127.0.0.1]:8080", "[::1]/x", "u@[::1]"])
def test_a_bracketed_address_is_refused(value):
    refused_for_everyone(value)


@pytest.mark.parametrize("value", ["customer:vip%2D1", "customer%3Avip-1", "customer:%76ip-1/x", "customer:vip%252D1",
                                   "CUSTOMER:VIP%2d1"])
def test_a_percent_escaped_off_limits_name_is_refused(value):
    # a service that decodes the value works on customer:vip-1 (off-limits `customer:vip-*`): ALLOWED before
    refused_for_everyone(value)
    assert probe(value, ("refunder",)) != ALLOWED


def test_names_that_reach_no_off_limits_machine_are_still_names():
    assert probe("customer:42", ("refunder",)) == ALLOWED  # a port-shaped name: host `customer` is not off-limits
    assert probe("customer:regular-x", ()) == ALLOWED
    assert probe("customer:regular-1", ("refunder",)) == ALLOWED
    assert probe("doc%20one", ("prober",)) == ALLOWED  # an escape that spells no host
    assert probe("project:\u2764\ufe0f", ("prober",)) == ALLOWED  # an emoji's variation selector
    assert probe("team@", ("prober",)) == ALLOWED  # no host after the `@`


# -- item: IDNA deviation characters ----------------------------------------------------------


@pytest.mark.parametrize("value", [
    "weiss.example", "WEISS.example", "weiß.example", "WEIẞ.example", "xn--wei-7ka.example", "www.weiss.example",
    "fuß.example", "FUẞ.EXAMPLE", "fuss.example",
    "σοφοσ.example", "ΣΟΦΟΣ.example", "σοφος.example",
    "क्\u200cष.example", "क्\u200dष.example",
    "https://weiss.example/", "u:p@weiss.example", "u:p@fuß.example", "https://FUẞ.example:8443/x",
])
def test_a_deviation_spelling_of_an_off_limits_host_is_refused(value):
    refused_for_everyone(value)


def test_a_deviation_spelling_reaches_no_other_entry():
    assert probe("weis.example") == ALLOWED
    assert probe("fus.example") == ALLOWED


# -- item: slash look-alikes in URL paths ------------------------------------------------------


@pytest.mark.parametrize("slash", ["\u2215", "\u2044", "\u29f8", "\u2571", "%E2%88%95", "%e2%81%84"])
def test_a_slash_look_alike_is_a_slash_to_a_url_scope(slash):
    assert probe(f"https://api.example.com/v1/users{slash}me", ("webber",)) in (OUT_OF_SCOPE, INVALID)
    assert probe(f"https://api.example.com/v1/..{slash}admin", ("webber",)) in (OUT_OF_SCOPE, INVALID)
    assert probe(f"https://docs.example.com/admin{slash}users") in REFUSED
    assert probe(f"https://docs.example.com/admin{slash}users", ("browser",)) in REFUSED


@pytest.mark.parametrize("backslash", ["\u2216", "\u29f5", "%E2%88%96"])
def test_a_backslash_look_alike_in_a_url_path_is_refused(backslash):
    assert probe(f"https://api.example.com/v1/users{backslash}me", ("webber",)) == INVALID


def test_urls_without_look_alikes_are_matched_as_before():
    assert probe("https://api.example.com/v1/users", ("webber",)) == ALLOWED
    assert probe("https://api.example.com/v1/%C3%BCber", ("webber",)) == ALLOWED  # an escaped letter


# -- the class, by hypothesis --------------------------------------------------------------

# off-limits machines of policies.py and the shipped set, each as (label, ...) Unicode spellings
HOSTS = [
    ("payments", "lab", "example", "com"), ("www", "irs", "gov"), ("bücher", "example"), ("münchen", "de"),
    ("weiß", "example"), ("fuss", "example"), ("localhost",), ("intranet-hr",), ("db-main",),
]
ADDRESSES = ["127.0.0.1", "10.9.9.9", "10.99.3.4", "127.1.2.3"]
IGNORABLES = ["\u00ad", "\u034f", "\u180b", "\u200b", "\u2060", "\ufe0f", "\ufeff", "\U000e0041", "\U000e0100", "\u3164"]
DEVIATIONS = {"ss": ["ß", "ẞ", "ss", "SS"], "ß": ["ß", "ẞ", "ss", "SS"]}
DOTS = [".", "\u3002", "\uff0e", "\uff61", "%2e", "%2E", "%252e"]


def full_width(c: str) -> str:
    return chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c


@st.composite
def label_spelling(draw: st.DrawFn, label: str) -> str:
    for plain, spellings in DEVIATIONS.items():
        if plain in label:
            label = label.replace(plain, draw(st.sampled_from(spellings)))
    out = []
    for c in label:
        form = draw(st.sampled_from(["same", "same", "upper", "full", "escaped"]))
        c = {"upper": c.upper(), "full": full_width(c),
             "escaped": "".join(f"%{b:02X}" for b in c.encode())}.get(form, c)
        out.append(c)
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(st.sampled_from(IGNORABLES)))
    return "".join(out)


@st.composite
def machine_spelling(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        labels = draw(st.sampled_from(HOSTS))
        if draw(st.booleans()):
            labels = ("x", *labels)  # a subdomain
        host = "".join((draw(st.sampled_from(DOTS)) if i else "") + draw(label_spelling(label))
                       for i, label in enumerate(labels))
        host += draw(st.sampled_from(["", "", ".", "\u3002"]))  # a trailing dot
    else:
        address = ipaddress.IPv4Address(draw(st.sampled_from(ADDRESSES)))
        n = int(address)
        host = draw(st.sampled_from([str(address), str(n), f"0x{n:x}", f"0{n:o}", ".".join(f"0x{b:x}" for b in address.packed),
                                     f"{address.packed[0]}.{n & 0xFFFFFF}", str(address).replace(".", "%2e"),
                                     "".join(full_width(c) for c in str(address)), f"[::ffff:{address}]"]))
    userinfo = draw(st.sampled_from(["", "", "u@", "u:p@", "customer:x@", "customer:@", "a@b@"]))
    port = draw(st.sampled_from(["", "", ":80", ":", ":08080"]))
    rest = draw(st.sampled_from(["", "/", "/x", "?q", "#f", "\\x"]))
    return userinfo + host + port + rest


@settings(max_examples=300, deadline=None)
@given(value=machine_spelling())
def test_no_spelling_of_an_off_limits_machine_is_allowed(value):
    refused_for_everyone(value)


SLASH_LIKES = ["\u2215", "\u2044", "\u29f8", "\u2571", "\u27cb", "\u1735", "\u2041", "\u31d3", "\U0001d23a"]


@st.composite
def slash_spelling(draw: st.DrawFn) -> str:
    char = draw(st.sampled_from(SLASH_LIKES))
    return draw(st.sampled_from([char, "".join(f"%{b:02X}" for b in char.encode()),
                                 "".join(f"%{b:02x}" for b in char.encode())]))


@settings(max_examples=150, deadline=None)
@given(slash=slash_spelling(), segments=st.lists(st.sampled_from(["users", "me", "..", ".", "admin", "x", ""]),
                                                  min_size=1, max_size=4))
def test_no_slash_look_alike_admits_more_than_a_slash(slash, segments):
    for base, chain in (("https://api.example.com/v1/", ("webber",)), ("https://docs.example.com/admin/", ()),
                        ("https://docs.example.com/admin/", ("browser",))):
        with_slash = probe(base + "/".join(segments), chain)
        with_look_alike = probe(base + slash.join(segments), chain)
        if with_look_alike == ALLOWED:
            assert with_slash == ALLOWED, (base + slash.join(segments), chain)
        if with_slash in REFUSED and with_slash != INVALID:  # off-limits with `/`: so with its look-alike
            assert with_look_alike in REFUSED, (base + slash.join(segments), chain)
