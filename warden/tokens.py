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

Format: `<label>.<key id>.<base64url(canonical JSON claims)>.<base64url(Ed25519 signature)>`, the
signature over `<label>.<key id>.<claims>` by the key the id names (`token_keys`: the checkpoint
holds the private keys, anyone may hold the public set). The claims carry `iat` and `exp` (Unix
seconds): a token is refused from `exp` on. Labels `wrun2` and `wapv2`; tokens of the earlier
shared-secret format (`wrun1`, `wapv1`) are refused. (Run tokens are memoised by `runs`, once
established: a run presents the same token on every call.)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from warden import canonical
from warden.token_keys import KeySet

RUN_LABEL = "wrun2"
APPROVAL_LABEL = "wapv2"
RETIRED_LABELS = frozenset({"wrun1", "wapv1"})  # the shared-secret (HMAC) format: never accepted
MAX_TOKEN_BYTES = 64 * 1024
RUN_TOKEN_TTL_SECONDS = 7 * 24 * 3600  # a run's stretches (2 h each by default) and days of waiting for a person
APPROVAL_TOKEN_TTL_SECONDS = 3600  # `warden approve` relays it at once; an hour covers a driver's restart


class TokenInvalid(ValueError):
    """A token that is not one this checkpoint signed (or not of the expected kind)."""


class TokenExpired(TokenInvalid):
    """A token this checkpoint signed whose lifetime is over."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


PublicKeys = Callable[[str], Ed25519PublicKey | None]


def verify(token: str, label: str, public_key: PublicKeys, now: float) -> dict[str, Any]:
    """The claims of a token of kind `label` signed by a key of the set `public_key` looks up (key
    id -> public key, None when it is not in the set), alive at `now`; TokenInvalid otherwise
    (TokenExpired when only its lifetime is over). Needs no private key: any process may call it."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenInvalid("token too long")
    parts = token.split(".")
    kind = parts[0]
    if kind in RETIRED_LABELS and kind[:-1] == label[:-1]:
        raise TokenInvalid(f"a {kind} token: that shared-secret format is no longer accepted")
    if len(parts) != 4 or kind != label or not all(parts[1:]):
        raise TokenInvalid(f"not a {label} token")
    _, kid, payload, signature = parts
    public = public_key(kid)
    if public is None:
        raise TokenInvalid(f"signed with key {kid[:32]!r}, which is not in the published set")
    try:
        given = _unb64(signature)
        # One spelling per token: base64 that gives the same bytes another way (a character added,
        # the last character's unused bits set) would be another string that verifies, and a token
        # is memoised and compared as a string.
        if _b64(given) != signature:
            raise TokenInvalid("signature does not verify")
        try:
            public.verify(given, f"{label}.{kid}.{payload}".encode("ascii"))
        except InvalidSignature:
            raise TokenInvalid("signature does not verify") from None
        claims = json.loads(_unb64(payload))
    except (binascii.Error, ValueError, UnicodeError) as exc:
        if isinstance(exc, TokenInvalid):
            raise
        raise TokenInvalid("token is not well formed") from None
    if not isinstance(claims, dict):
        raise TokenInvalid("token claims are not an object")
    expires = claims.get("exp")
    if not isinstance(expires, int) or isinstance(expires, bool):
        raise TokenInvalid("token claims name no lifetime")
    if now >= expires:
        raise TokenExpired(f"the token expired at {_utc(expires)}")
    return claims


def _utc(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Signer:
    """Signs and verifies one kind of token with the checkpoint's key set. Thread-safe."""

    def __init__(self, keys: KeySet, label: str, ttl_seconds: float, clock: Callable[[], float] = time.time):
        self.label = label
        self.keys = keys
        self.ttl_seconds = ttl_seconds
        self.clock = clock

    def sign(self, claims: dict[str, Any]) -> str:
        """`claims` with `iat` and `exp` added, signed by the active key."""
        kid, key = self.keys.signing_key()
        issued = int(self.clock())
        stamped = {**claims, "iat": issued, "exp": issued + max(1, math.ceil(self.ttl_seconds))}
        body = f"{self.label}.{kid}.{_b64(canonical.dumps(stamped))}"
        return f"{body}.{_b64(key.sign(body.encode('ascii')))}"

    def verify(self, token: str, at: float | None = None) -> dict[str, Any]:
        """The claims of a token this checkpoint's key set signed, alive at `at` (default: now);
        raises TokenInvalid otherwise."""
        return verify(token, self.label, self.keys.public_key, self.clock() if at is None else at)


def key_id_of(token: str) -> str:
    """The key id a token names (its signature not checked): '' when it names none."""
    parts = token.split(".", 2)
    return parts[1] if len(parts) == 3 else ""


def unverified_claims(token: str, label: str) -> dict[str, Any] | None:
    """What a token of kind `label` says, its signature NOT checked; None when it is not one.
    For reading a token already verified (`verify`), never for believing one."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != label or not all(parts[1:]) or len(token) > MAX_TOKEN_BYTES:
        return None
    try:
        claims = json.loads(_unb64(parts[2]))
    except (binascii.Error, ValueError, UnicodeError):
        return None
    return claims if isinstance(claims, dict) else None


def call_digest(key: bytes, claims: dict[str, Any]) -> str:
    """A keyed digest of a whole call: equal calls give equal digests; the log can keep it without
    letting anyone test guesses of masked arguments against it."""
    return hmac.new(key, canonical.dumps(claims), hashlib.sha256).hexdigest()
