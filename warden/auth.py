"""Caller authentication: which credential a call carries. What it may do is the principal's
business (checkpoint.policy.principals); this module only names the identity:

- Unix domain socket: the socket file's permissions (0600 / 0660) decide who can connect at all;
  a connected caller is the identity `unix`. No token is asked for.
- TCP with mTLS: the TLS handshake already refused clients without a certificate signed by the
  configured CA; a verified peer is `mtls:<its first identity>`.
- TCP otherwise: the caller sends `authorization: Bearer <token>`. A token of the key file
  (warden/keyfile.py) is `person:NAME` or `service:NAME` (a key `warden keys add` made) or
  `token:NAME` (a line `NAME TOKEN` kept in clear); an OIDC identity token (warden/oidc.py), when
  OIDC is configured, is `oidc:NAME`. The key file is looked at on every call and re-read when it
  changed, so a key added or revoked counts from the next call, with no restart.

A credential's roles (warden/credentials.py) must cover the call, else it is refused like a
missing credential. Health checks and reflection are open: a liveness probe carries no token, and
the service description is the published proto. Refusals are answered with UNAUTHENTICATED and
the stable code `unauthenticated`, and handed to `on_refused` so the service can record them in
the decision log.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from warden import keyfile
from warden.credentials import Credential
from warden.keyfile import TokenFileError

__all__ = ["AuthPolicy", "KeySource", "OnRefused", "TokenFileError", "bearer_identity", "load_tokens"]

log = logging.getLogger(__name__)
_BEARER = "bearer "


def load_tokens(path: str | Path, *, require_names: bool = False) -> dict[bytes, str]:
    """Read a token file of `NAME TOKEN` lines (or bare tokens); `#` comments.

    Returns sha256(token) -> caller name. Tokens are kept hashed so a memory dump or a log line
    of this structure does not hand out credentials. A file others can read is refused.
    `require_names`: every line must name its caller (operators: the name is the approver the
    record keeps, so it may not be made up). The keys `warden keys add` writes belong to the
    checkpoint (KeySource): a file holding one is refused here rather than read in part.
    """
    path = Path(path)
    keys = keyfile.read(path, require_names=require_names)
    kinded = [k for k in keys if k.kind != keyfile.LEGACY]
    if kinded:
        raise TokenFileError(f"{path}: {kinded[0].name!r} is a key of `warden keys add`, which the checkpoint "
                             f"reads; this file takes `NAME TOKEN` lines")
    tokens = {key.digest: key.name for key in keys}
    if not tokens:
        raise TokenFileError(f"{path}: no tokens")
    return tokens


class KeySource:
    """The checkpoint's key file, re-read when it changes: a stat per call, a read per change.

    A file that cannot be read or does not load any more lets nobody in until it does (fail
    closed): a revoked key must not keep working because the file was half written by hand."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, ...] | None = _stamp(self.path)
        self._keys = keyfile.active(keyfile.read(self.path, require_names=True))

    def credential(self, token: str) -> Credential | None:
        digest = hashlib.sha256(token.encode()).digest()
        with self._lock:
            self._refresh()
            keys = self._keys
        # Hashes are compared, each in constant time: the time taken says nothing about how much
        # of a token was right.
        found = None
        for known, key in keys.items():
            if hmac.compare_digest(known, digest):
                found = key
        return Credential(found.identity, found.roles) if found is not None else None

    def _refresh(self) -> None:
        try:
            stamp = _stamp(self.path)
        except OSError as exc:
            if self._keys:
                log.error("key file %s unreadable (%s): nobody is let in with a key until it is back", self.path, exc)
            self._keys, self._stamp = {}, None
            return
        if stamp == self._stamp:
            return
        try:
            self._keys = keyfile.active(keyfile.read(self.path, require_names=True))
        except (OSError, TokenFileError, UnicodeDecodeError) as exc:
            log.error("key file %s does not load (%s): nobody is let in with a key until it does", self.path, exc)
            self._keys = {}
        self._stamp = stamp


def _stamp(path: Path) -> tuple[int, ...]:
    # a rewrite is a rename: a new inode, and a new change time even when the inode number is reused
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class Verifier(Protocol):
    """An OIDC identity token's verifier (warden.oidc.OidcVerifier), as this module uses it."""

    def credential(self, token: str) -> Credential | None: ...


@dataclass
class AuthPolicy:
    """How TCP callers prove who they are. With no tokens, keys, OIDC or mTLS, TCP is refused entirely.

    `tokens`: sha256(token) -> NAME, fixed (load_tokens); `keys`: the key file, followed;
    `oidc`: identity tokens' verifier."""

    tokens: dict[bytes, str] = field(default_factory=dict)
    mtls: bool = False
    keys: KeySource | None = None
    oidc: Verifier | None = None

    @property
    def configured(self) -> bool:
        """Can a TCP caller authenticate at all (other than by mTLS)?"""
        return bool(self.tokens) or self.keys is not None or self.oidc is not None

    def caller(self, context: grpc.ServicerContext) -> str | None:
        """The authenticated caller's plain name (a token line's NAME), or None."""
        identity = self.identity(context)
        if identity is None:
            return None
        return "unix-socket" if identity == "unix" else identity.split(":", 1)[-1] if identity.startswith(
            ("token:", "person:", "service:", "oidc:")) else identity

    def identity(self, context: grpc.ServicerContext, method: str = "") -> str | None:
        """The authenticated caller's identity (`token:NAME`, `person:NAME`, `service:NAME`,
        `oidc:NAME`, `mtls:SUBJECT`, `unix`), or None. With `method` (a gRPC method path), a
        credential whose roles do not cover it is None too."""
        peer = context.peer()
        if peer.startswith("unix:"):
            return "unix"
        if self.mtls:
            ids = context.peer_identities()
            if ids:
                return "mtls:" + ids[0].decode(errors="replace")
        if self.configured:
            for key, value in context.invocation_metadata():
                if key == "authorization" and isinstance(value, str) and value[:7].lower() == _BEARER:
                    credential = self.credential(value)
                    if credential is None or (method and not credential.may(method)):
                        return None
                    return credential.identity
        return None

    def credential(self, header: str) -> Credential | None:
        """The credential an `authorization` value `Bearer TOKEN` carries, or None. The
        checkpoint and the auditor's web view both ask this."""
        if header[:7].lower() != _BEARER:
            return None
        token = header[7:].strip()
        if self.oidc is not None and token.count(".") == 2:
            return self.oidc.credential(token)
        if self.keys is not None:
            found = self.keys.credential(token)
            if found is not None:
                return found
        identity = bearer_identity(self.tokens, header) if self.tokens else None
        return Credential(identity) if identity else None


def bearer_identity(tokens: dict[bytes, str], header: str) -> str | None:
    """`token:NAME` for an `authorization` value `Bearer TOKEN` whose token a line of the token
    file names, else None."""
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
