"""Caller authentication: which credential a call carries. What it may do is the principal's
business (checkpoint.policy.principals); this module only names the identity:

- Unix domain socket: the socket file's permissions (0600 / 0660) decide who can connect at all;
  a connected caller is the identity `unix`. No token is asked for.
- TCP with mTLS: the TLS handshake already refused clients without a certificate signed by the
  configured CA; a verified peer is `mtls:<its first identity>`.
- TCP otherwise: the caller sends `authorization: Bearer <token>`; tokens come from a file whose
  line `NAME TOKEN` makes the identity `token:NAME`.

Health checks and reflection are open: a liveness probe carries no token, and the service
description is the published proto. Refusals are answered with UNAUTHENTICATED and the stable code
`unauthenticated`, and handed to `on_refused` so the service can record them in the decision log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from warden.private import UntrustedFileError, read_trusted_text

_BEARER = "bearer "


class TokenFileError(ValueError):
    code = "token_file_invalid"


def load_tokens(path: str | Path, *, require_names: bool = False) -> dict[bytes, str]:
    """Read a token file: one token per line, optionally `caller-name token`; `#` comments.

    Returns sha256(token) -> caller name. Tokens are kept hashed so a memory dump or a log line
    of this structure does not hand out credentials. A file others can read is refused.
    `require_names`: every line must name its caller (operators: the name is the approver the
    record keeps, so it may not be made up).
    """
    path = Path(path)
    try:
        text = read_trusted_text(path, "token file", secret=True)
    except UntrustedFileError as exc:
        raise TokenFileError(str(exc)) from None
    tokens: dict[bytes, str] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) > 2 or (require_names and len(parts) != 2):
            expected = "'person token'" if require_names else "'token' or 'caller token'"
            raise TokenFileError(f"{path}:{lineno}: expected {expected}")
        caller, token = (parts[0], parts[1]) if len(parts) == 2 else (f"token-{lineno}", parts[0])
        if ":" in caller or caller == "unix":
            # `token:NAME` must never read as another kind of identity (`mtls:...`, `unix`)
            raise TokenFileError(f"{path}:{lineno}: the caller name {caller!r} may not contain ':' or be 'unix'")
        if len(token) < 16:
            raise TokenFileError(f"{path}:{lineno}: token shorter than 16 characters")
        tokens[hashlib.sha256(token.encode()).digest()] = caller
    if not tokens:
        raise TokenFileError(f"{path}: no tokens")
    return tokens


@dataclass
class AuthPolicy:
    """How TCP callers prove who they are. With neither tokens nor mTLS, TCP is refused entirely."""

    tokens: dict[bytes, str] = field(default_factory=dict)
    mtls: bool = False

    def caller(self, context: grpc.ServicerContext) -> str | None:
        """The authenticated caller's plain name (a token line's NAME), or None."""
        identity = self.identity(context)
        if identity is None:
            return None
        return "unix-socket" if identity == "unix" else identity.removeprefix("token:")

    def identity(self, context: grpc.ServicerContext) -> str | None:
        """The authenticated caller's identity (`token:NAME`, `mtls:SUBJECT`, `unix`), or None."""
        peer = context.peer()
        if peer.startswith("unix:"):
            return "unix"
        if self.mtls:
            ids = context.peer_identities()
            if ids:
                return "mtls:" + ids[0].decode(errors="replace")
        if self.tokens:
            for key, value in context.invocation_metadata():
                if key == "authorization" and isinstance(value, str) and value[:7].lower() == _BEARER:
                    return bearer_identity(self.tokens, value)
        return None


def bearer_identity(tokens: dict[bytes, str], header: str) -> str | None:
    """`token:NAME` for an `authorization` value `Bearer TOKEN` whose token a line of the token
    file names, else None. The checkpoint and the auditor's web view both ask this."""
    if header[:7].lower() != _BEARER:
        return None
    digest = hashlib.sha256(header[7:].strip().encode()).digest()
    # Hashes are compared, each in constant time: the time taken says nothing about how much of
    # a token was right.
    for known, name in tokens.items():
        if hmac.compare_digest(known, digest):
            return f"token:{name}"
    return None


# How a server answers a call without valid credentials: record it (or only count it), given the
# method, the request and the call's context.
OnRefused = Callable[[str, Any, grpc.ServicerContext], None]
