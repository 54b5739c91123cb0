"""People sign in with their organisation's OIDC identity tokens: approvers and auditors send
`authorization: Bearer <JWT>` to the checkpoint and the audit page instead of a warden key.

A token is taken only when all of these hold, else it is refused as unauthenticated:

- it is signed by a key of the identity provider's JWKS (a file, or a URL fetched and cached), with
  the algorithm that key is for: the algorithm comes from the key, never from the token alone, so
  `alg: none` and an HMAC "signed" with the public key as its secret (algorithm confusion) fail;
- its `iss` is the configured issuer and its `aud` names the configured audience;
- it has an `exp` in the future, and its `nbf` and `iat`, when present, are not in the future;
- the claim chosen as the person's name (`sub` unless configured) is a plain name;
- when a roles claim is configured, one of its values maps to a role (approver or auditor).

The identity is `oidc:NAME`: a principal lists it (`oidc:*`, `oidc:carol`) and the tenant roles
name NAME as they name any person; the token's roles only narrow what the policy gives.

The JWKS at a URL is fetched at most every `min_refetch` seconds when a token names a key id it
does not hold (a key the provider rotated in), and refreshed after `refresh` seconds. When the
URL cannot be reached, the keys fetched before still verify their tokens; a token no cached key
fits is refused (fail closed).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt
from jwt.api_jwk import PyJWK, PyJWKSet

from warden.credentials import Credential
from warden.private import read_trusted_text

log = logging.getLogger(__name__)

# Signatures by a key pair only: an HMAC secret would have to be shared with every checkpoint.
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
OIDC_ROLES = ("approver", "auditor")
MAX_JWKS_BYTES = 1 << 20
LEEWAY_SECONDS = 30  # clocks of the provider and the checkpoint may differ this much
_NAME_MAX = 128


class OidcConfigError(ValueError):
    """OIDC settings that cannot work: the checkpoint or the audit page does not start."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    jwks: str  # a file path, or an https:// URL (http:// only to a loopback address)
    name_claim: str = "sub"
    roles_claim: str = ""  # e.g. groups; empty: every token is for both approver and auditor
    role_map: dict[str, str] = field(default_factory=dict)  # a roles claim's value -> approver|auditor
    refresh: float = 300.0
    min_refetch: float = 30.0

    def __post_init__(self) -> None:
        if not self.issuer or not self.audience or not self.jwks:
            raise OidcConfigError("OIDC needs an issuer, an audience and a JWKS (file or URL)")
        bad = {value: role for value, role in self.role_map.items() if role not in OIDC_ROLES}
        if bad:
            value, role = next(iter(bad.items()))
            raise OidcConfigError(f"OIDC role mapping {value!r}={role!r}: an identity token may only be "
                                  f"for {' or '.join(OIDC_ROLES)}")
        if self.role_map and not self.roles_claim:
            raise OidcConfigError("OIDC role mappings need the claim they read (--oidc-roles-claim)")
        if _is_url(self.jwks):
            parts = urlsplit(self.jwks)
            if parts.scheme != "https" and not (parts.scheme == "http" and _loopback(parts.hostname or "")):
                raise OidcConfigError(f"the JWKS URL {self.jwks!r} must be https (http only on a loopback address)")


def parse_role_map(pairs: list[str] | None) -> dict[str, str]:
    """`VALUE=ROLE` pairs (`--oidc-role warden-approvers=approver`) as a mapping."""
    mapping: dict[str, str] = {}
    for pair in pairs or []:
        value, eq, role = pair.rpartition("=")
        if not eq or not value:
            raise OidcConfigError(f"OIDC role mapping {pair!r}: expected CLAIM_VALUE=ROLE")
        mapping[value] = role
    return mapping


def _is_url(source: str) -> bool:
    return source.startswith(("https://", "http://"))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class JwksCache:
    """The provider's public keys by key id, from a file (re-read when it changes) or a URL."""

    def __init__(self, settings: OidcSettings, *, clock: Any = time.monotonic) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, PyJWK] = {}
        self._fetched: float | None = None  # when the keys were last fetched
        self._tried: float | None = None  # when a fetch was last tried
        self._stamp: tuple[int, ...] | None = None

    def key(self, kid: str | None) -> PyJWK | None:
        """The key `kid` names (with no kid: the only key, if there is one), or None."""
        with self._lock:
            if self._stale() or (kid not in self._keys and self._may_retry()):
                self._load()
            if kid is None:
                return next(iter(self._keys.values())) if len(self._keys) == 1 else None
            return self._keys.get(kid)

    def _stale(self) -> bool:
        if not _is_url(self.settings.jwks):
            try:
                st = Path(self.settings.jwks).stat()
            except OSError:
                return True
            return _file_stamp(st) != self._stamp
        return self._fetched is None or self._clock() - self._fetched >= self.settings.refresh

    def _may_retry(self) -> bool:
        return self._tried is None or self._clock() - self._tried >= self.settings.min_refetch

    def _load(self) -> None:
        self._tried = self._clock()
        source = self.settings.jwks
        try:
            if _is_url(source):
                text = _fetch(source)
            else:
                st = Path(source).stat()
                text = read_trusted_text(source, "JWKS file")
                self._stamp = _file_stamp(st)
            keys = _parse_jwks(text)
        except (OSError, ValueError, jwt.PyJWTError) as exc:
            # the keys fetched before stay: a token one of them signed is still verified; any other is refused
            log.error("JWKS %s cannot be read (%s); %d cached key(s) stay in use", source, exc, len(self._keys))
            if not _is_url(source):
                self._keys = {}  # a file that went away or went bad: nobody signs in with it
                self._stamp = None
            return
        self._keys, self._fetched = keys, self._clock()


def _file_stamp(st: os.stat_result) -> tuple[int, ...]:
    # the change time too: a chmod that lets others write the file must be seen (and refused)
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _fetch(url: str) -> str:
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - https, or http to loopback only
        body: bytes = answer.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
    return body.decode("utf-8")


def _parse_jwks(text: str) -> dict[str, PyJWK]:
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise ValueError("not a JWKS: no `keys` list")
    usable = [k for k in data["keys"] if isinstance(k, dict) and k.get("kty") != "oct" and k.get("use", "sig") == "sig"]
    keys: dict[str, PyJWK] = {}
    for index, key in enumerate(PyJWKSet.from_dict({"keys": usable}).keys if usable else []):
        keys[key.key_id or f"#{index}"] = key
    return keys


class OidcVerifier:
    """Identity tokens -> credentials, under one configuration."""

    def __init__(self, settings: OidcSettings, *, jwks: JwksCache | None = None) -> None:
        self.settings = settings
        self.jwks = jwks or JwksCache(settings)

    def credential(self, token: str) -> Credential | None:
        """The credential a valid identity token carries, or None; a refusal is logged at debug
        level with its reason (a token is never logged)."""
        try:
            return self._verify(token)
        except (jwt.PyJWTError, ValueError, KeyError, TypeError) as exc:
            log.debug("OIDC token refused: %s", exc)
            return None

    def _verify(self, token: str) -> Credential | None:
        header = jwt.get_unverified_header(token)
        alg = header.get("alg")
        if alg not in ALGORITHMS:
            raise jwt.InvalidAlgorithmError(f"algorithm {alg!r} is not accepted")
        kid = header.get("kid")
        key = self.jwks.key(kid if isinstance(kid, str) else None)
        if key is None:
            raise jwt.InvalidKeyError(f"no key of the JWKS has the id {kid!r}")
        if key.algorithm_name != alg:  # a key is for one algorithm: the token may not pick another
            raise jwt.InvalidAlgorithmError(f"the key {kid!r} is for {key.algorithm_name}, the token says {alg}")
        settings = self.settings
        claims = jwt.decode(
            token, key=key.key, algorithms=[alg], audience=settings.audience, issuer=settings.issuer,
            leeway=LEEWAY_SECONDS, options={"require": ["exp", "iss", "aud"], "verify_iat": True},
        )
        name = claims.get(settings.name_claim)
        if not isinstance(name, str) or not name or len(name) > _NAME_MAX or any(
                c.isspace() or c in ":*" for c in name):
            raise ValueError(f"the claim {settings.name_claim!r} is not a plain name")
        roles = self._roles(claims)
        if not roles:
            raise ValueError(f"no value of the claim {settings.roles_claim!r} maps to a role")
        return Credential(f"oidc:{name}", roles)

    def _roles(self, claims: dict[str, Any]) -> tuple[str, ...]:
        settings = self.settings
        if not settings.roles_claim:
            return OIDC_ROLES
        values = claims.get(settings.roles_claim)
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list):
            return ()
        mapped = {settings.role_map[v] for v in values if isinstance(v, str) and v in settings.role_map}
        return tuple(role for role in OIDC_ROLES if role in mapped)


def looks_like_jwt(token: str) -> bool:
    """Three base64url parts: an identity token, not a warden key (which has no dot)."""
    return token.count(".") == 2
