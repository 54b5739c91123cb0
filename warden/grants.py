"""Grants: the checkpoint's signed permission to run exactly one tool call.

Scheme: HMAC-SHA256 over the canonical JSON of the grant's fields, with a key that only the
checkpoint and the toolrunner hold (never the driver, never the model). See docs/grants.md for
the threat model and why HMAC rather than Ed25519 (about 4 us to sign or verify here, against
71 us / 240 us, on the hot path of every allowed call).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden import canonical
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.private import private_folder, read_trusted_text

DEFAULT_TTL_SECONDS = 120
KEY_BYTES = 32


class GrantError(Exception):
    """A grant the toolrunner must refuse; `code` is one of the toolrunner's stable codes."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class SigningKey:
    key_id: str
    # Out of repr: a key printed in a log line, a traceback or a test failure is a leaked key.
    secret: bytes = field(repr=False)

    @classmethod
    def generate(cls) -> SigningKey:
        secret = secrets.token_bytes(KEY_BYTES)
        return cls(key_id=hashlib.sha256(secret).hexdigest()[:16], secret=secret)

    @classmethod
    def load(cls, path: str | Path) -> SigningKey:
        data = json.loads(read_trusted_text(path, "grant key", secret=True))
        secret = bytes.fromhex(data["secret"])
        if len(secret) < KEY_BYTES:
            raise ValueError(f"{path}: key is shorter than {KEY_BYTES} bytes")
        return cls(key_id=data["key_id"], secret=secret)

    def save(self, path: str | Path) -> None:
        """Write the key readable by its owner only (0600); refuse to overwrite."""
        path = Path(path)
        private_folder(path.parent)  # a folder made here holds the key: owner only, as the stores' are
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"key_id": self.key_id, "secret": self.secret.hex(), "alg": "HS256"}, f)
            f.write("\n")


def _signed_bytes(grant: pb.Grant) -> bytes:
    return _payload(
        grant.decision_id,
        grant.run_id,
        grant.agent,
        grant.agent_version,
        grant.tool,
        grant.arguments_sha256,
        grant.policy_revision,
        grant.expires_at.seconds * 1000 + grant.expires_at.nanos // 1_000_000,
        grant.key_id,
    )


def _payload(
    decision_id: str,
    run_id: str,
    agent: str,
    agent_version: str,
    tool: str,
    arguments_sha256: str,
    policy_revision: str,
    expires_at_ms: int,
    key_id: str,
) -> bytes:
    """The signed bytes: canonical JSON of the grant's fields (see docs/grants.md)."""
    return canonical.dumps(
        {
            "v": 1,
            "decision_id": decision_id,
            "run_id": run_id,
            "agent": agent,
            "agent_version": agent_version,
            "tool": tool,
            "arguments_sha256": arguments_sha256,
            "policy_revision": policy_revision,
            "expires_at_ms": expires_at_ms,
            "key_id": key_id,
        }
    )


def sign(
    key: SigningKey,
    *,
    decision_id: str,
    run_id: str,
    agent: str,
    agent_version: str,
    tool: str,
    arguments: Any,
    policy_revision: str,
    ttl_seconds: float = DEFAULT_TTL_SECONDS,
    now: float | None = None,
) -> pb.Grant:
    grant = pb.Grant()
    sign_into(grant, key, decision_id=decision_id, run_id=run_id, agent=agent, agent_version=agent_version,
              tool=tool, arguments_sha256=canonical.sha256_hex(arguments), policy_revision=policy_revision,
              ttl_seconds=ttl_seconds, now=now)
    return grant


def sign_into(
    grant: pb.Grant,
    key: SigningKey,
    *,
    decision_id: str,
    run_id: str,
    agent: str,
    agent_version: str,
    tool: str,
    arguments_sha256: str,
    policy_revision: str,
    ttl_seconds: float = DEFAULT_TTL_SECONDS,
    now: float | None = None,
) -> None:
    """`sign`, written into `grant` (an answer's own field: no copy) for arguments whose canonical
    hash the caller has already. The signed bytes are built from the values given, the same bytes
    `verify` rebuilds from the grant's fields."""
    expires_ms = int(((time.time() if now is None else now) + ttl_seconds) * 1000)
    seconds, ms = divmod(expires_ms, 1000)
    # set first: a value protobuf refuses (text that is not UTF-8) fails here, before any signing
    grant.decision_id = decision_id
    grant.run_id = run_id
    grant.agent = agent
    grant.agent_version = agent_version
    grant.tool = tool
    grant.arguments_sha256 = arguments_sha256
    grant.policy_revision = policy_revision
    grant.key_id = key.key_id
    grant.expires_at.seconds = seconds
    grant.expires_at.nanos = ms * 1_000_000
    grant.signature = hmac.digest(key.secret, _payload(decision_id, run_id, agent, agent_version, tool,
                                                       arguments_sha256, policy_revision, expires_ms, key.key_id),
                                  "sha256")


def verify(
    keys: dict[str, SigningKey] | SigningKey,
    grant: pb.Grant | None,
    *,
    run_id: str,
    agent_version: str,
    tool: str,
    arguments: Any,
    now: float | None = None,
) -> None:
    """Raise GrantError unless `grant` was signed by a known key for exactly this call, unexpired.

    Order matters: the signature is checked before any field is trusted, so a forged grant is
    `grant_invalid` whatever it claims.
    """
    if grant is None or not grant.signature:
        raise GrantError("grant_missing", "the call carries no grant")
    keyring = {keys.key_id: keys} if isinstance(keys, SigningKey) else keys
    key = keyring.get(grant.key_id)
    expected = hmac.new(key.secret, _signed_bytes(grant), hashlib.sha256).digest() if key else b""
    if not key or not hmac.compare_digest(expected, grant.signature):
        raise GrantError("grant_invalid", "the grant's signature does not verify")
    expires = grant.expires_at.seconds + grant.expires_at.nanos / 1e9
    if (time.time() if now is None else now) >= expires:
        raise GrantError("grant_expired", f"the grant expired at {grant.expires_at.ToJsonString()}")
    try:
        arguments_sha256 = canonical.sha256_hex(arguments)
    except (ValueError, TypeError) as exc:  # no canonical form (NaN, an integer beyond 2**53): no grant covers it
        raise GrantError("grant_mismatch", f"the call's arguments have no canonical form: {exc}") from None
    mismatches = [
        name
        for name, got, want in (
            ("run_id", grant.run_id, run_id),
            ("agent_version", grant.agent_version, agent_version),
            ("tool", grant.tool, tool),
            ("arguments", grant.arguments_sha256, arguments_sha256),
        )
        if got != want
    ]
    if mismatches:
        raise GrantError("grant_mismatch", "the grant was issued for a different " + ", ".join(mismatches))
