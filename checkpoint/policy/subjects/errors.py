"""The types of subject and the error of text that reads as one and is not a valid one."""

from __future__ import annotations

from typing import Literal

Kind = Literal["host", "ip", "url", "name"]
KINDS: tuple[Kind, ...] = ("host", "ip", "url", "name")


class SubjectError(ValueError):
    """Text that looks like a host, an address or a URL, and is not a valid one."""


def show(text: str) -> str:
    return repr(text[:80] + ("..." if len(text) > 80 else ""))
