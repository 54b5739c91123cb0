"""Signed statements the checkpoint hands out and later believes: run tokens and approval tokens.

The checkpoint keeps no run state, yet must not take a run's authority from a request field. So
what it established once travels in a token it signed, and every later request presents it:

- A **run token** (from StartRun, or from an allowed delegation) binds the run id, its root and
  parent, tenant, mode, the actor chain from the accountable person through each agent with its
  pinned version, narrowing and granted budget, the verified inputs, and the principal it was
  issued to. A child's token comes only from an allowed delegation, so a child cannot pose as a
  root run, drop an ancestor or widen a link.
- An **approval token** (from Approve, called with the approver's own credential) binds the run,
  the REQUIRE_APPROVAL decision, a keyed digest of the whole call (every argument, masked or not)
  and the approver's identity.

Format: `<label>.<base64url(canonical JSON claims)>.<base64url(HMAC-SHA256(label.claims))>`, keyed
by a key derived from the grant key, so rotating the grant key retires every token. (Run tokens
are memoised by `runs`, once established: a run presents the same token on every call.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from warden import canonical

RUN_LABEL = "wrun1"
APPROVAL_LABEL = "wapv1"
MAX_TOKEN_BYTES = 64 * 1024


class TokenInvalid(ValueError):
    """A token that is not one this checkpoint signed (or not of the expected kind)."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and verifies one kind of token. Thread-safe."""

    def __init__(self, secret: bytes, label: str):
        self.label = label
        self._key = hmac.new(secret, f"warden {label} token".encode(), hashlib.sha256).digest()

    def sign(self, claims: dict[str, Any]) -> str:
        body = f"{self.label}.{_b64(canonical.dumps(claims))}"
        return f"{body}.{_b64(hmac.new(self._key, body.encode('ascii'), hashlib.sha256).digest())}"

    def verify(self, token: str) -> dict[str, Any]:
        """The claims of a token this signer made; raises TokenInvalid otherwise."""
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenInvalid("token too long")
        label, _, rest = token.partition(".")
        payload, _, signature = rest.partition(".")
        if label != self.label or not payload or not signature:
            raise TokenInvalid(f"not a {self.label} token")
        body = f"{label}.{payload}"
        try:
            given = _unb64(signature)
            expected = hmac.new(self._key, body.encode("ascii"), hashlib.sha256).digest()
            # One spelling per token: base64 that gives the same bytes another way (a character
            # added, the last character's unused bits set) would be another string that verifies,
            # and a token is memoised and compared as a string. Compared only once the bytes are
            # right, so the text comparison tells nothing about the key.
            if not hmac.compare_digest(given, expected) or _b64(given) != signature:
                raise TokenInvalid("signature does not verify")
            claims = json.loads(_unb64(payload))
        except (binascii.Error, ValueError, UnicodeError) as exc:
            if isinstance(exc, TokenInvalid):
                raise
            raise TokenInvalid("token is not well formed") from None
        if not isinstance(claims, dict):
            raise TokenInvalid("token claims are not an object")
        return claims


def unverified_claims(token: str, label: str) -> dict[str, Any] | None:
    """What a token of kind `label` says, its signature NOT checked; None when it is not one.
    For a holder of no key (the driver names the approver in its own history from this); the
    checkpoint verifies the token when it is used."""
    kind, _, rest = token.partition(".")
    payload, _, signature = rest.partition(".")
    if kind != label or not payload or not signature or len(token) > MAX_TOKEN_BYTES:
        return None
    try:
        claims = json.loads(_unb64(payload))
    except (binascii.Error, ValueError, UnicodeError):
        return None
    return claims if isinstance(claims, dict) else None


def call_digest(key: bytes, claims: dict[str, Any]) -> str:
    """A keyed digest of a whole call: equal calls give equal digests; the log can keep it without
    letting anyone test guesses of masked arguments against it."""
    return hmac.new(key, canonical.dumps(claims), hashlib.sha256).hexdigest()
