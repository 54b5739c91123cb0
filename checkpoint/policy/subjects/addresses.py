"""IP addresses and ranges as one integer interval (IPv4 as its IPv4-mapped IPv6 range), and the
addresses a value also reaches: IPv4 carried in IPv6, and every spelling of this host."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator

from checkpoint.policy.subjects.errors import SubjectError, show

IPV6ISH = re.compile(r"\[?[0-9a-f.]*(?::[0-9a-f.]*){2,}\]?(?:%[^/]*)?(?:/[^/]*)?", re.IGNORECASE)
_PREFIX = re.compile(r"([^/]+)(?:/(0|[1-9][0-9]{0,2}))?")
LEGACY_V4 = re.compile(r"((?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){1,3})\*")
_V4_MAPPED = 0xFFFF << 32  # ::ffff:0:0/96, where IPv6 keeps IPv4 addresses


def _span(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> tuple[int, int]:
    low = int(net.network_address) + (_V4_MAPPED if net.version == 4 else 0)
    return low, low + net.num_addresses - 1


def ip_span(text: str, *, strict: bool, prefix_ok: bool = True) -> tuple[int, int]:
    """An address or CIDR range, canonical spellings only. `strict`: no host bits after the prefix."""
    m = _PREFIX.fullmatch(text)
    if m is None or (m.group(2) is not None and not prefix_ok):
        raise SubjectError(f"{show(text)} is not an IP address" + ("" if prefix_ok else " (no /prefix here)"))
    address, bits = m.group(1), m.group(2)
    if address.startswith("[") or "%" in address:
        raise SubjectError(f"{show(text)}: brackets and zone ids (%eth0) are not part of an address")
    try:
        parsed = ipaddress.ip_address(address)  # refuses 010.9.9.9, 10.9.2313, 0x0a090909
    except ValueError:
        raise SubjectError(
            f"{show(text)} is not a canonical IP address (IPv4 is four decimal numbers, no leading zeros)"
        ) from None
    if bits is None:  # one address: skip building a network, the common case on the hot path
        low = int(parsed) + (_V4_MAPPED if parsed.version == 4 else 0)
        return low, low
    try:
        net = ipaddress.ip_network(f"{parsed}/{bits}", strict=strict)
    except ValueError as exc:
        raise SubjectError(f"{show(text)} is not an IP range: {exc}") from None
    return _span(net)


# IPv6 blocks that carry an IPv4 address a translator or tunnel delivers to (base, size, shift of
# the IPv4 bits): IPv4-translated ::ffff:0:0:0/96 (SIIT), the NAT64 well-known prefix
# 64:ff9b::/96 (RFC 6052) and 6to4 2002::/16 (RFC 3056, bits 16-47). IPv4-compatible ::/96 is
# deprecated and routed nowhere: another address.
_V4_CARRIERS = ((0xFFFF << 48, 1 << 32, 0), (0x64FF9B << 96, 1 << 32, 0), (0x2002 << 112, 1 << 112, 80))


def embedded_v4(span: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """The IPv4 addresses (as IPv4-mapped spans) an IPv6 value or range reaches through a carrier
    block: off-limits `10.9.9.9` also refuses `64:ff9b::10.9.9.9` and `2002:a09:909::1`."""
    low, high = span
    for base, size, shift in _V4_CARRIERS:
        lo, hi = max(low, base), min(high, base + size - 1)
        if lo <= hi:
            yield _V4_MAPPED + ((lo - base) >> shift), _V4_MAPPED + ((hi - base) >> shift)


# Addresses that reach this host whatever its interfaces: IPv4 loopback 127.0.0.0/8, IPv6 loopback
# ::1, and the unspecified 0.0.0.0 and ::, which Linux connects to the local host.
_THIS_HOST = ((_V4_MAPPED + (127 << 24), _V4_MAPPED + (128 << 24) - 1), (1, 1), (_V4_MAPPED, _V4_MAPPED), (0, 0))


def this_host(span: tuple[int, int]) -> Iterator[tuple[int, int]]:
    """Every spelling of this host when a value or range holds one: off-limits `127.0.0.0/8` also
    refuses `0.0.0.0`, `::` and `::1`, and off-limits `::1` refuses `127.0.0.1`."""
    if any(span[0] <= high and low <= span[1] for low, high in _THIS_HOST):
        yield from _THIS_HOST
