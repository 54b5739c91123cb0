"""Signed webhooks: how the checkpoint signs a notification, and how a receiver checks one.

A notification's body is signed with a secret the checkpoint and the receiver share, over the
time of sending and the exact bytes of the body, in one header:

    Warden-Signature: t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd

`v1` is the hex HMAC-SHA256 of `"{t}." + body` keyed with the secret (the scheme Stripe and Slack
use). A receiver recomputes it with `verify_signature`, which also refuses a time outside its
window: a body captured once and sent again later (a replay) fails even with a good signature.
Several `v1=` values may appear while a secret is being replaced; one matching is enough.

This module imports nothing of warden's processes: a receiver written in Python copies or imports
it alone (docs/approvals.md has the same check in a few lines of any language).
"""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path

HEADER = "Warden-Signature"
SCHEME = "v1"
# How far a notification's time may be from the receiver's clock, either way.
DEFAULT_TOLERANCE_SECONDS = 300
MAX_HEADER_CHARS = 1024


class SignatureInvalid(ValueError):
    """The header is missing or malformed, no signature matches, or its time is outside the window."""


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """The hex HMAC-SHA256 of `"{timestamp}." + body` under `secret`."""
    return hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def sign_header(secret: bytes, body: bytes, *, now: float | None = None) -> str:
    """The `Warden-Signature` header's value for `body`, sent now."""
    timestamp = int(time.time() if now is None else now)
    return f"t={timestamp},{SCHEME}={signature(secret, timestamp, body)}"


def verify_signature(secret: bytes, header: str | None, body: bytes, *,
                     tolerance: float = DEFAULT_TOLERANCE_SECONDS, now: float | None = None) -> int:
    """Check a notification: `header` is the `Warden-Signature` value as received and `body` the
    raw bytes of the request's body (before any JSON parsing). Returns the signed time; raises
    SignatureInvalid otherwise. Keep the decision ids you have handled as well if a replay
    within the window matters to you: the time bounds how late a copy can come, not how many."""
    if not secret:
        raise SignatureInvalid("no secret to check the signature with")
    if not header or len(header) > MAX_HEADER_CHARS:
        raise SignatureInvalid(f"no {HEADER} header")
    timestamp: int | None = None
    given: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            raise SignatureInvalid(f"malformed {HEADER} header")
        if name == "t":
            if timestamp is not None or not value.isascii() or not value.isdigit():
                raise SignatureInvalid(f"malformed time in the {HEADER} header")
            timestamp = int(value)
        elif name == SCHEME:
            given.append(value)
    if timestamp is None or not given:
        raise SignatureInvalid(f"the {HEADER} header names no time or no {SCHEME} signature")
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance:
        raise SignatureInvalid(f"the signature's time is {int(clock - timestamp)} s from now, outside "
                               f"the {int(tolerance)} s window (a replay, or a clock far off)")
    expected = signature(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, value) for value in given):
        raise SignatureInvalid("no signature matches the body under this secret")
    return timestamp


def read_secret(path: str | Path) -> bytes:
    """A webhook secret from its file: the whole file, surrounding whitespace stripped; an empty
    file is an error (a notification signed with nothing proves nothing)."""
    secret = Path(path).read_bytes().strip()
    if not secret:
        raise ValueError(f"the webhook secret file {path} is empty")
    return secret
