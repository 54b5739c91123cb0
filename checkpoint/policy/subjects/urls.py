"""URLs, as values and as the parts of an entry: scheme, host (a host or an address), port, path."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from checkpoint.policy.subjects.addresses import ip_span
from checkpoint.policy.subjects.errors import SubjectError, show
from checkpoint.policy.subjects.hosts import ends_in_number, host_2003, normalise_host
from checkpoint.policy.subjects.paths import map_look_alikes, normalise_path
from checkpoint.policy.subjects.subject import Subject

_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:]*)(?::([0-9]*))?")  # a URL's netloc without userinfo
_URL_REFUSED = re.compile(r"[\x00-\x20\x7f\\]")  # whitespace, controls, and `\` (read as `/` by browsers)
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}


def read_url(text: str, folded: str, *, pattern: bool) -> tuple[Subject, bool]:
    """A URL value, or a URL pattern's parts (then the host may start `*.`; returns the wildcard)."""
    if _URL_REFUSED.search(folded):
        raise SubjectError(f"{show(text)}: whitespace, controls and '\\' are refused in a URL")
    try:
        parts = urlsplit(folded)
    except ValueError as exc:
        raise SubjectError(f"{show(text)} is not a URL: {exc}") from None
    if not parts.scheme or not parts.netloc:
        raise SubjectError(f"{show(text)} is not a URL with a scheme and a host")
    if "@" in parts.netloc:  # `https://api.example.com@evil.com/` goes to evil.com
        raise SubjectError(f"{show(text)}: credentials in a URL (user@host) are refused")
    if pattern and (parts.query or parts.fragment or "?" in folded or "#" in folded):
        raise SubjectError(f"{show(text)}: a URL pattern names no query or fragment ('?' is not a wildcard here)")
    m = _HOST_PORT.fullmatch(parts.netloc)
    if m is None or not m.group(1):
        raise SubjectError(f"{show(text)} has no valid host[:port]")
    host_text, port_text = m.group(1), m.group(2)
    wildcard = pattern and host_text.startswith("*.")
    if wildcard:
        host_text = host_text[2:]
    if host_text.startswith("["):
        of = Subject("ip", host_text, span=ip_span(host_text[1:-1], strict=True, prefix_ok=False))
        if wildcard:
            raise SubjectError(f"{show(text)}: '*.' goes before a host name, not an address")
    elif ends_in_number(host_text):
        of = Subject("ip", host_text, span=ip_span(host_text, strict=True, prefix_ok=False))
    else:
        host = normalise_host(host_text)
        if ends_in_number(host):
            of = Subject("ip", host_text, span=ip_span(host, strict=True, prefix_ok=False))
        else:
            of = Subject("host", host_text, host=host, alt=host_2003(host_text, host))
    port = int(port_text) if port_text else DEFAULT_PORTS.get(parts.scheme)
    if port is not None and port > 65535:
        raise SubjectError(f"{show(text)}: port {port} is out of range")
    path = normalise_path(parts.path)
    mapped = map_look_alikes(parts.path)
    # a server that maps look-alikes serves `/v1/a∕b` as `/v1/a/b`, one that does not as a segment
    # `a∕b`: both readings are kept, scope admits the path when both are inside, off-limits refuses either
    alt_path, path = (path, normalise_path(mapped)) if mapped != parts.path else ("", path)
    url = Subject("url", text, scheme=parts.scheme, port=port, path=path, of=of, alt_path=alt_path)
    return url, wildcard
