"""A touched value, as read: the one type every reader returns and every entry is matched against."""

from __future__ import annotations

from dataclasses import dataclass

from checkpoint.policy.subjects.errors import Kind


@dataclass(frozen=True, slots=True)
class Subject:
    """One touched value, read once per call."""

    kind: Kind
    text: str  # as the call wrote it: names are matched on it, messages quote it
    host: str = ""  # host: the A-label form (IDNA 2008)
    span: tuple[int, int] = (0, -1)  # ip: first and last address (IPv4 as IPv4-mapped IPv6)
    scheme: str = ""  # url: lower case
    port: int | None = None  # url: None when the scheme has no default and none is written
    path: str = ""  # url: normalised, slash look-alikes read as `/`; no query or fragment
    of: Subject | None = None  # url: its host, a `host` or an `ip` subject
    alt: str = ""  # host: the IDNA 2003 spelling when it is another name (`weiß` -> `weiss`), else ""
    alt_path: str = ""  # url: the normalised path with its slash look-alikes kept, when they were any
    machine: Subject | None = None  # name: the host a URL parser reads in it (`localhost:8080`), else None

    def hosts(self) -> tuple[str, ...]:
        """A host's spellings a client may look up: IDNA 2008's, and IDNA 2003's when it differs."""
        return (self.host, self.alt) if self.alt else (self.host,)
