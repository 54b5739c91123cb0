"""Property: no spelling of an off-limits subject is ever allowed.

Hypothesis builds spellings of the off-limits hosts and addresses (policies.py, plus the shipped
`payments.lab.example.com` and `*.gov`): case flips, Unicode dots, trailing dots, Unicode or
punycode labels, integer / hex / short / zero-padded IPv4, `/32` suffixes, ranges that contain
them, IPv4-mapped IPv6, and URLs around any of them with dot segments and percent-escapes. Each is
sent by a person (no scope) and by an agent whose scope is `*`: off-limits is all that stands in
the way, and the answer must be subject_off_limits or invalid_arguments, never ALLOW.
"""

from __future__ import annotations

import ipaddress

from hypothesis import given, settings
from hypothesis import strategies as st

from .policies import probe

# (Unicode form, A-label form) of off-limits hosts, and subdomains of "*.gov"
HOSTS = [
    ("payments.lab.example.com", "payments.lab.example.com"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("münchen.de", "xn--mnchen-3ya.de"),
    ("www.irs.gov", "www.irs.gov"),
    ("straße.gov", "xn--strae-oqa.gov"),
]
ADDRESSES = ["10.9.9.9", "10.99.0.1", "10.99.255.254"]
DOTS = [".", ".", "\u3002", "\uff0e", "\uff61"]


@st.composite
def host_spellings(draw: st.DrawFn) -> str:
    unicode_form, ascii_form = draw(st.sampled_from(HOSTS))
    labels = [draw(st.sampled_from(pair)) for pair in zip(unicode_form.split("."), ascii_form.split("."), strict=True)]
    if draw(st.booleans()):
        labels.insert(0, draw(st.sampled_from(["x", "www", "a-b", "ünï"])))  # off-limits covers subdomains
    text = "".join(label + draw(st.sampled_from(DOTS)) for label in labels)[:-1]
    text = "".join(c.upper() if draw(st.booleans()) else c for c in text)
    return text + draw(st.sampled_from(["", ".", "\u3002"]))


@st.composite
def address_spellings(draw: st.DrawFn) -> str:
    address = ipaddress.IPv4Address(draw(st.sampled_from(ADDRESSES)))
    n, octets = int(address), address.packed
    form = draw(st.sampled_from(["plain", "int", "hex", "short3", "short2", "octal", "padded", "slash32",
                                 "range", "mapped", "mapped-hex", "mapped-range"]))
    if form == "plain":
        return str(address)
    if form == "int":
        return str(n)
    if form == "hex":
        return draw(st.sampled_from([f"0x{n:08x}", f"0X{n:X}"]))
    if form == "short3":
        return f"{octets[0]}.{octets[1]}.{n & 0xFFFF}"
    if form == "short2":
        return f"{octets[0]}.{n & 0xFFFFFF}"
    if form == "octal":
        return ".".join(f"0{b:o}" for b in octets)
    if form == "padded":
        return ".".join(f"{b:03d}" for b in octets)
    if form == "slash32":
        return f"{address}/32"
    if form == "range":
        bits = draw(st.integers(0, 32))
        return str(ipaddress.IPv4Network(f"{address}/{bits}", strict=False))
    if form == "mapped":
        return draw(st.sampled_from([f"::ffff:{address}", f"::FFFF:{address}", f"0:0:0:0:0:ffff:{address}"]))
    if form == "mapped-hex":
        return f"::ffff:{n >> 16:x}:{n & 0xFFFF:x}"
    bits = draw(st.integers(0, 128))  # an IPv6 range containing the mapped address
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    return str(ipaddress.IPv6Network(f"{mapped}/{bits}", strict=False))


PATHS = ["", "/", "/a/../b", "/%2e%2e/", "/./x", "/v1/%61dmin", "/a/%2E%2E/%2e/b"]


@st.composite
def url_spellings(draw: st.DrawFn) -> str:
    host = draw(st.one_of(host_spellings(), address_spellings().filter(lambda a: "/" not in a)))
    if ":" in host:
        host = f"[{host}]"
    elif draw(st.booleans()) and host.isascii():  # percent-escape one character of the host
        i = draw(st.integers(0, len(host) - 1))
        host = host[:i] + f"%{ord(host[i]):02x}" + host[i + 1:]
    scheme = draw(st.sampled_from(["http", "https", "HTTPS", "ftp"]))
    port = draw(st.sampled_from(["", ":443", ":8080"]))
    return f"{scheme}://{host}{port}{draw(st.sampled_from(PATHS))}"


@settings(max_examples=200, deadline=None)
@given(value=st.one_of(host_spellings(), address_spellings(), url_spellings()), by_agent=st.booleans())
def test_no_spelling_of_an_off_limits_subject_is_allowed(value, by_agent):
    verdict, code = probe(value, ("prober",) if by_agent else ())
    assert verdict == "DENY" and code in ("subject_off_limits", "invalid_arguments"), (value, verdict, code)
