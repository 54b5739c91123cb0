"""The reader and normaliser on edge values (checkpoint/policy/subjects/)."""

from __future__ import annotations

import pytest

from checkpoint.policy.subjects import (
    ANY,
    OffLimits,
    SubjectError,
    SubjectSet,
    normalise_host,
    normalise_path,
    read_pattern,
    read_value,
)

OFF = OffLimits([(read_pattern("10.9.9.9"), "one address"), (read_pattern("*.gov"), "government")])


def test_empty_string_is_a_name_that_nothing_typed_matches():
    s = read_value("")
    assert s.kind == "name"
    assert OFF.reason(s) is None
    assert not SubjectSet([read_pattern("*.lab.example.com"), read_pattern("10.20.0.*")]).matches(s)


def test_label_length_limits():
    assert read_value("a" * 63 + ".example").host == "a" * 63 + ".example"
    with pytest.raises(SubjectError, match="1 to 63"):
        read_value("a" * 64 + ".example")
    with pytest.raises(SubjectError, match="1 to 253"):
        read_value(".".join(["a" * 60] * 5))  # 304 characters
    with pytest.raises(SubjectError):
        read_value("a..example")  # an empty label


def test_a_lone_star_is_anything_as_an_entry_and_a_plain_name_as_a_value():
    assert read_pattern("*") is ANY and read_pattern("**") is ANY
    assert SubjectSet([ANY]).matches(read_value("10.9.9.9"))
    assert read_value("*").kind == "name"
    assert OFF.reason(read_value("*")) is None


def test_a_value_is_one_subject_not_a_pattern():
    with pytest.raises(SubjectError):
        read_value("*.gov")  # was off-limits as a glob; as a target it names nothing
    with pytest.raises(SubjectError):
        read_value("10.20.0.*")


@pytest.mark.parametrize("text", ["fe80::1%eth0", "fe80::1%25eth0", "[::1]"])
def test_ipv6_zone_ids_and_brackets_are_refused(text):
    with pytest.raises(SubjectError):
        read_value(text)
    with pytest.raises(SubjectError):
        read_pattern(text)


@pytest.mark.parametrize("text", ["::ffff:10.9.9.9", "::FFFF:a09:909", "0:0:0:0:0:ffff:0a09:0909", "::ffff:10.9.9.0/120"])
def test_ipv4_mapped_ipv6_is_the_ipv4_address(text):
    assert OFF.reason(read_value(text)) == "one address"


def test_ipv6_outside_the_mapped_block_is_not_ipv4():
    assert OFF.reason(read_value("::10.9.9.9")) is None  # IPv4-compatible (deprecated): another address
    assert OFF.reason(read_value("2001:db8::a09:909")) is None


@pytest.mark.parametrize("legacy, cidr", [("10.*", "10.0.0.0/8"), ("10.20.*", "10.20.0.0/16"),
                                          ("10.20.0.*", "10.20.0.0/24")])
def test_a_trailing_octet_wildcard_is_the_equivalent_range(legacy, cidr):
    assert read_pattern(legacy).span == read_pattern(cidr).span


@pytest.mark.parametrize("text", ["10.20.*.5", "10.20.0.1*", "256.1.1.*", "010.20.0.*"])
def test_other_address_wildcards_are_refused(text):
    with pytest.raises(SubjectError):
        read_pattern(text)


@pytest.mark.parametrize("text, host", [
    ("Bücher.Example.", "xn--bcher-kva.example"),
    ("ＢＵＣＨＥＲ．example", "bucher.example"),  # full-width letters and dot
    ("XN--BCHER-KVA.example", "xn--bcher-kva.example"),
    ("_dmarc.Example.com", "_dmarc.example.com"),  # service labels stay legal
])
def test_hosts_normalise_to_lower_case_a_labels(text, host):
    assert read_value(text).host == host


@pytest.mark.parametrize("text", ["xn--zz.example", "\U0001f4a3.example", "a b.example", "x.example:443"])
def test_hosts_idna_or_the_label_rules_refuse(text):
    with pytest.raises(SubjectError):
        read_value(text)


def test_a_host_that_reads_as_an_address_is_the_address():
    assert read_value("１０.9.9.9").kind == "ip"  # full-width digits fold to 10.9.9.9
    assert OFF.reason(read_value("１０.9.9.9")) == "one address"
    with pytest.raises(SubjectError):
        normalise_host("a b")


@pytest.mark.parametrize("path, normal", [
    ("", "/"),
    ("/a/./b/../c", "/a/c"),
    ("/a/b/..", "/a/"),
    ("/../../x", "/x"),
    ("/%7euser/%41%2d%5a", "/~user/A-Z"),  # unreserved escapes decoded
    ("/a%3fb", "/a%3Fb"),  # reserved ones kept, upper case
    ("/v1/%2e%2E/admin", "/admin"),
])
def test_url_paths_normalise(path, normal):
    assert normalise_path(path) == normal


def test_names_keep_their_text_and_off_limits_names_ignore_case():
    off = OffLimits([(read_pattern("customer:vip-*"), "vip")])
    assert off.reason(read_value("CUSTOMER:VIP-7")) == "vip"
    assert off.reason(read_value("customer:regular")) is None
    assert read_pattern("customer:vip-*").kind == "name"



def test_a_single_label_name_entry_is_the_host_in_any_spelling():
    off = OffLimits([(read_pattern("bücher"), "a Unicode label"), (read_pattern("db-*"), "by glob")])
    assert read_pattern("bücher").kind == "name"
    for value in ("bücher", "BÜCHER", "xn--bcher-kva.", "www.bücher.", "http://xn--bcher-kva/"):
        assert off.reason(read_value(value)) == "a Unicode label", value
    assert off.reason(read_value("db-main.")) == "by glob"
    assert off.reason(read_value("bücher.example")) is None  # the label is not the host's last


def test_what_the_reader_returns_for_a_machine_inside_a_name():
    s = read_value("LOCALHOST:8080/x")
    assert s.kind == "name" and s.text == "LOCALHOST:8080/x"
    assert s.machine is not None and (s.machine.kind, s.machine.host) == ("host", "localhost")
    assert read_value("customer:vip-1").machine is None  # its "port" is no number: no host
    assert read_value("customer:42").machine.host == "customer"
    assert read_value("local\ufe0fhost").machine.host == "localhost"  # a variation selector is dropped
    for text in ("u:p@127.0.0.1", "payments%2elab%2eexample%2ecom", "[::1]:80", "127?x"):
        with pytest.raises(SubjectError):
            read_value(text)


def test_what_the_reader_returns_for_a_deviation_spelling():
    s = read_value("Weiß.example")
    assert (s.host, s.alt, s.hosts()) == ("xn--wei-7ka.example", "weiss.example", ("xn--wei-7ka.example", "weiss.example"))
    assert read_value("weiss.example").alt == ""  # ASCII has one spelling
    assert read_value("xn--wei-7ka.example").alt == ""  # an A-label is looked up as written
    off = OffLimits([(read_pattern("fuss.example"), "ss"), (read_pattern("*.weiß.example"), "ß")])
    assert off.reason(read_value("FUẞ.example")) == "ss"
    assert off.reason(read_value("www.weiss.example")) == "ß"
    scope = SubjectSet([read_pattern("weiss.example")])
    assert not scope.matches(read_value("weiß.example"))  # its IDNA 2008 spelling is another name
    assert SubjectSet([read_pattern("weiß.example")]).matches(read_value("weiß.example"))


def test_what_the_reader_returns_for_a_slash_look_alike():
    s = read_value("https://api.example.com/v1/a\u2215b")
    assert (s.path, s.alt_path) == ("/v1/a/b", "/v1/a\u2215b")
    assert read_value("https://api.example.com/v1/a%E2%88%95b").path == "/v1/a/b"
    assert read_value("https://api.example.com/v1/%C3%BC").alt_path == ""  # no look-alike: one reading
    assert SubjectSet([read_pattern("https://api.example.com/v1/**")]).matches(s)
    assert not SubjectSet([read_pattern("https://api.example.com/v1/*")]).matches(s)
