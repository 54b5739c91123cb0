"""Every spelling that let an off-limits or out-of-scope machine through a text glob, refused.

Each test goes through the real decision function: the shipped recon agent and tool where their
schema lets the spelling through, the `probe` tool (any string) otherwise (see policies.py).
A person's call has no scope, so only the off-limits reading stands between it and ALLOW.
"""

from __future__ import annotations

import pytest

from .policies import ALLOWED, INVALID, OFF_LIMITS, OUT_OF_SCOPE, check, extended, probe, target

# -- host names -----------------------------------------------------------------------------


def test_punycode_spelling_of_an_off_limits_unicode_host_is_refused():
    assert probe("xn--bcher-kva.example") == OFF_LIMITS  # the entry is written "bücher.example"
    assert target("www.xn--bcher-kva.example") == OFF_LIMITS  # through the shipped tool too


def test_unicode_spelling_of_an_off_limits_punycode_host_is_refused():
    assert probe("münchen.de") == OFF_LIMITS  # the entry is written "xn--mnchen-3ya.de"
    assert probe("shop.münchen.de") == OFF_LIMITS


@pytest.mark.parametrize("value", ["XN--BCHER-KVA.EXAMPLE", "MÜNCHEN.DE", "Shop.MÜNCHEN.de"])
def test_upper_case_spelling_is_refused(value):
    assert probe(value) == OFF_LIMITS


@pytest.mark.parametrize("value", ["xn--bcher-kva.example.", "münchen.de."])
def test_trailing_dot_is_refused(value):
    assert probe(value) == OFF_LIMITS


@pytest.mark.parametrize("dot", ["\u3002", "\uff0e", "\uff61"], ids=["U+3002", "U+FF0E", "U+FF61"])
def test_unicode_dot_forms_are_refused(dot):
    assert probe(f"payments{dot}lab{dot}example{dot}com") == OFF_LIMITS  # a shipped entry
    assert probe(f"www{dot}irs{dot}gov") == OFF_LIMITS  # shipped "*.gov"


# -- addresses ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    pytest.param("168364297", id="integer-10.9.9.9"),
    pytest.param("167641093", id="integer"),
    pytest.param("0x0a090909", id="hex"),
    pytest.param("0xa.0x9.0x9.0x9", id="hex-octets"),
    pytest.param("10.9.2313", id="short"),
    pytest.param("10.592137", id="shorter"),
    pytest.param("010.9.9.9", id="octal-ish"),
    pytest.param("10.9.9.9.", id="trailing-dot"),
])
def test_non_canonical_address_spellings_are_invalid_arguments(value):
    assert target(value) == INVALID  # a person's call: only the reading refuses it
    assert target(value, ("recon",)) == INVALID  # and an agent's, before any scope question


def test_off_limits_cidr_entry_matches_by_containment():
    assert target("10.99.7.7") == OFF_LIMITS  # the entry is 10.99.0.0/16
    assert target("10.98.7.7") == ALLOWED


def test_slash_32_suffix_is_the_address():
    assert target("10.9.9.9/32") == OFF_LIMITS
    assert target("10.99.1.1/32") == OFF_LIMITS


@pytest.mark.parametrize("value", ["10.9.9.0/24", "10.0.0.0/8", "10.99.128.0/17", "0.0.0.0/0"])
def test_target_range_overlapping_an_off_limits_host_or_range_is_refused(value):
    assert target(value) == OFF_LIMITS


def test_target_range_is_in_scope_only_when_wholly_contained():
    # recon's scope is 10.20.0.* (read as 10.20.0.0/24); a range needs approval (rule
    # wide-scans-need-approval), which is how we see that scope let it through
    assert target("10.20.0.128/25", ("recon",)) == ("REQUIRE_APPROVAL", "approval_required")
    assert target("10.20.0.0/23", ("recon",)) == OUT_OF_SCOPE
    assert target("10.20.0.0/16", ("recon",)) == OUT_OF_SCOPE


def test_ipv4_mapped_ipv6_is_the_ipv4_address():
    assert probe("::ffff:10.9.9.9") == OFF_LIMITS
    assert probe("::ffff:a09:909") == OFF_LIMITS


@pytest.mark.parametrize("value", [
    "64:ff9b::10.9.9.9",  # NAT64 well-known prefix: a translator delivers it to 10.9.9.9
    "64:ff9b::a09:909",
    "::ffff:0:10.9.9.9",  # IPv4-translated (SIIT)
    "2002:a09:909::1",  # 6to4: the IPv4 address sits in bits 16-47
    "2002:a09:900::/40",  # a 6to4 range over 10.9.0.0/24
    "64:ff9b::/64",  # a range holding the whole NAT64 block
    "http://[64:ff9b::10.99.1.1]/",
])
def test_ipv6_that_carries_an_off_limits_ipv4_address_is_off_limits(value):
    # each was ALLOWED: only ::ffff:0:0/96 was read as IPv4
    assert probe(value) == OFF_LIMITS
    assert probe(value, ("prober",)) == OFF_LIMITS


def test_ipv6_carrying_other_ipv4_addresses_is_not_off_limits():
    assert probe("64:ff9b::10.20.0.5") == ALLOWED
    assert probe("2002:a14:5::1") == ALLOWED
    assert probe("2001:4860::1") == ALLOWED
    assert target("64:ff9b::10.20.0.5", ("recon",)) == INVALID  # the shipped schema: an IPv4 target only


@pytest.mark.parametrize("value", ["0.0.0.0", "::", "::1", "0:0:0:0:0:0:0:1", "::ffff:127.0.0.1", "0.0.0.0/32",
                                   "::/128", "http://0.0.0.0:8080/", "http://[::]/", "http://[::1]/",
                                   "::ffff:0:7f00:1", "64:ff9b::7f00:1", "64:ff9b::0.0.0.0"])
def test_every_spelling_of_this_host_is_off_limits_with_its_loopback(value):
    # off-limits 127.0.0.0/8: Linux connects 0.0.0.0 and :: to this host, and ::1 is its IPv6 loopback
    assert probe(value) == OFF_LIMITS
    assert probe(value, ("prober",)) == OFF_LIMITS


def test_addresses_beside_this_host_are_not_taken_for_it():
    for value in ("0.0.0.1", "128.0.0.1", "126.255.255.255", "::2", "1.0.0.0"):
        assert probe(value) == ALLOWED, value


def test_address_pattern_never_matches_a_host_name():
    assert target("10.20.0.7", ("recon",)) == ALLOWED
    assert target("10.20.0.evil.com", ("recon",)) == OUT_OF_SCOPE


# -- URLs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "https://api.example.com/v1/..",
    "https://api.example.com/v1/%2e%2e",
    "https://api.example.com/v1/%2E%2e",
    "https://docs.example.com/v1/../admin",
    "https://docs.example.com/v1/./%2e%2e/admin",
])
def test_url_dot_segments_do_not_leave_the_scope(value):
    assert probe(value, ("webber",)) == OUT_OF_SCOPE


@pytest.mark.parametrize("value", [
    "https://api.example.com/v1/..%2fadmin",
    "https://api.example.com/v1/..%2Fadmin",
    "https://api.example.com/v1/..%5cadmin",
    "https://api.example.com/v1/%252e%252e",
    "https://api.example.com/v1/..;/admin",
    "https://api.example.com/v1/..\\admin",
])
def test_url_escapes_a_server_might_decode_into_structure_are_invalid(value):
    assert probe(value, ("webber",)) == INVALID


@pytest.mark.parametrize("value", [
    "https://api.example.com/v1//../admin",  # `/v1/admin` by RFC 3986, `/admin` after merging slashes
    "https://api.example.com/v1//%2e%2e/admin",
    "https://api.example.com//../v1/x",
])
def test_url_dot_segment_after_an_empty_segment_is_invalid(value):
    assert probe(value, ("webber",)) == INVALID  # the first was ALLOWED inside `/v1/*`


@pytest.mark.parametrize("value", [
    "https://docs.example.com/admin/users",
    "https://docs.example.com//admin/users",  # nginx merges the slashes and serves /admin/users
    "https://docs.example.com/admin//users",
    "https://DOCS.example.com///Admin/x",
])
def test_off_limits_url_path_is_matched_with_slashes_merged(value):
    assert probe(value) == OFF_LIMITS
    assert probe(value, ("browser",)) == OFF_LIMITS


def test_url_inside_the_scope_is_matched_on_its_normalised_form():
    assert probe("https://API.example.com:443/v1/%75sers", ("webber",)) == ALLOWED
    assert probe("https://api.example.com/v1/users/../me", ("webber",)) == ALLOWED
    assert probe("https://api.example.com/v1/users/me", ("webber",)) == OUT_OF_SCOPE  # `*` stays in a segment
    assert probe("http://api.example.com/v1/users", ("webber",)) == OUT_OF_SCOPE  # another scheme


@pytest.mark.parametrize("value", [
    "https://api.example.com@evil.com/",
    "https://x@evil.com#.example.com/",  # the glob read `x@evil.com#` as a subdomain label
])
def test_userinfo_does_not_fool_the_host_match(value):
    assert probe(value, ("browser",)) == INVALID


@pytest.mark.parametrize("value", [
    "localhost", "LOCALHOST", "ｌｏｃａｌｈｏｓｔ",  # names, as the entries are
    "localhost.", "LocalHost.", "api.localhost", "intranet-hr.", "x.intranet-hr",  # hosts
    "http://localhost/", "https://LOCALHOST.:8443/x", "http://intranet-wiki/",  # URLs to them
])
def test_a_single_label_off_limits_name_is_also_that_host(value):
    # an entry without a dot reads as a name, while `localhost.` and a URL's host read as hosts:
    # they were compared with host entries only, and ALLOWED
    assert probe(value) == OFF_LIMITS
    assert probe(value, ("prober",)) == OFF_LIMITS


def test_a_single_label_name_entry_refuses_no_other_host():
    assert probe("localhost.example.com") == ALLOWED  # another machine: the label is not its last
    assert probe("http://intranet/") == ALLOWED  # `intranet-*` needs the dash
    assert probe("intranet-wiki.example.com") == ALLOWED  # a glob of a single label, not of a whole host
    assert probe("a.intranet-wiki") == OFF_LIMITS  # that label's subdomains are its own


@pytest.mark.parametrize("value", [
    "//payments.lab.example.com/x",  # scheme-relative
    "https:payments.lab.example.com",  # WHATWG reads a special scheme without `//` as one with it
    "https:/payments.lab.example.com/",
    "HTTP:payments.lab.example.com",
    "http:\\\\payments.lab.example.com",
    "ｈｔｔｐｓ:www.irs.gov",
    "\\\\www.irs.gov\\share",
])
def test_a_url_written_without_scheme_slashes_is_not_a_name(value):
    # read as names, these passed off-limits for a person and for any agent whose scope is `*`
    assert probe(value) == INVALID
    assert probe(value, ("prober",)) == INVALID


@pytest.mark.parametrize("value", [
    "https://payments.lab.example.com/x",
    "https://PAYMENTS.lab.example.com./x/../y",
    "http://10.9.9.9:8080/",
    "http://[::ffff:10.9.9.9]/",
    "https://www.irs.gov/",
])
def test_a_url_to_an_off_limits_host_is_off_limits(value):
    assert probe(value, ("prober",)) == OFF_LIMITS


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "customer:vip-1 ",  # a service that trims works on customer:vip-1
    " customer:vip-1",
    "customer:vip-1\n",
    "customer:vip-1\t",
    "customer:vi\u200bp-1",  # a zero-width space: invisible to the person reading the request
    "\u202ecustomer:vip-1",  # a bidi override
    " //payments.lab.example.com/",
])
def test_names_with_edge_whitespace_controls_or_invisible_characters_are_invalid(value):
    # each was ALLOWED to a person: the off-limits glob `customer:vip-*` did not match it
    assert probe(value) == INVALID
    assert probe(value, ("prober",)) == INVALID


@pytest.mark.parametrize("value", [
    "customer:vip-1/orders",  # a scope's `*` stops at `/`; a deny list's does not
    "customer:vip-1 x",
    "customer:\uff56ip-1",  # full-width v: NFKC folds it, as the reader does for hosts
    "CUSTOMER:VIP-1/x",
])
def test_off_limits_name_globs_read_wide_and_folded(value):
    assert probe(value) == OFF_LIMITS
    assert probe(value, ("prober",)) == OFF_LIMITS


def test_plain_names_are_still_names():
    assert probe("customer:regular-1") == ALLOWED
    assert probe("customer:a b") == ALLOWED  # inner whitespace is part of a name
    assert check_refunds("customer:vip-1/x") == OUT_OF_SCOPE  # a scope's `*` still stops at `/`


def check_refunds(customer: str) -> tuple[str, str]:
    return check(extended(), "probe", {"target": customer}, ("refunder",))


@pytest.mark.parametrize("value", ["-iLx.lab.example.com", "-oProxyCommand=x.lab.example.com",
                                   "web-.lab.example.com", "web.-lab.example.com", "http://-x.lab.example.com/",
                                   "-ILX.LAB.EXAMPLE.COM", "\uff0diLx.lab.example.com", "-\u00fc.lab.example.com",
                                   "x-.lab.example.com."])
def test_a_host_label_at_a_hyphen_is_invalid(value):
    # inside the recon scope *.lab.example.com, the first would reach a tool's argv as an option
    assert probe(value, ("prober",)) == INVALID


def test_hyphens_inside_a_label_are_still_hosts():
    assert target("web-01.lab.example.com", ("recon",)) == ALLOWED
    assert probe("xn--bcher-kva.example") == OFF_LIMITS  # A-labels keep their `--`


# -- a NUL (the log stores it as U+FFFD; a C library reading the value stops at it) -----------


@pytest.mark.parametrize("value", [
    "payments.lab.example.com\x00", "payments\x00.lab.example.com", "\x00payments.lab.example.com",
    "payments.lab.example.com\x00.allowed.example", "www.irs.gov\x00", "10.9.9.9\x00", "db-main\x00",
    "customer:vip-1\x00", "customer:\x00vip-1", "https://docs.example.com/admin/x\x00",
    "https://payments.lab.example.com\x00/x", "payments.lab.example.com\ufffd",
])
def test_a_nul_or_its_replacement_in_an_off_limits_subject_never_allows(value):
    # without the NUL each is off-limits; with it the subject cannot be read as anything a service
    # would take, so it is refused before any scope question (and never allowed)
    assert probe(value) in (OFF_LIMITS, INVALID)
    assert probe(value) != ALLOWED
    # the C-string reading (up to the NUL) is off-limits where it names a subject
    head = value.split("\x00")[0].replace("\ufffd", "")
    if head in ("payments.lab.example.com", "www.irs.gov", "10.9.9.9", "db-main", "customer:vip-1"):
        assert probe(head) == OFF_LIMITS
