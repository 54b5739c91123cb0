"""The callers' key file (DATA/checkpoint.tokens): who may call, of which kind, in which roles.

Two kinds of line live in it, so a file written before `warden keys add` existed keeps working:

- `NAME TOKEN` (or a bare `TOKEN`): a token kept in clear, the identity `token:NAME`, any role.
  Processes that read their own token from the file (the driver, `warden up`) still find it.
- `NAME sha256:HEX kind=person|service roles=ROLE,... created=TIME [revoked=TIME]`: what
  `warden keys add` writes (`kind=token`: a line that was kept in clear, revoked). Only the token's SHA-256 is kept: the token is 256 random bits, so a
  fast hash is as strong as a slow one and costs nothing per call. A person's key is the identity
  `person:NAME`, a service's `service:NAME`: a principal that lists `service:driver` is never
  reached with a person's key, whatever its name.

A revoked key keeps its line (with `revoked=`), so its name is not handed out again and `keys
list` still says who it was. The file is rewritten whole, atomically (a temporary file, fsync,
rename) with mode 0600, under a lock, so a checkpoint reading it never sees half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from warden.private import FILE_MODE, UntrustedFileError, fsync_path, private_folder, read_trusted_text

PERSON, SERVICE, LEGACY = "person", "service", "token"
KINDS = (PERSON, SERVICE)
# What a credential may be used for (docs/checkpoint-service.md, 'People and services'): the
# tenant's roles, and `check` for asking decisions and running agents. `*`: whatever the policy
# gives its principal. The policy must also give the role: a key's roles only ever narrow.
ROLES = ("check", "operator", "approver", "auditor", "admin")
ANY_ROLE = "*"
_NAME = re.compile(r"^[^\s:*#=]{1,128}$")
_HASHED = re.compile(r"^sha256:([0-9a-f]{64})$")
MIN_TOKEN = 16


class TokenFileError(ValueError):
    code = "token_file_invalid"


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # person, service, or token (a line kept in clear, any kind)
    digest: bytes  # sha256 of the token
    roles: tuple[str, ...] = (ANY_ROLE,)
    created: str = ""
    revoked: str = ""
    clear: str = ""  # the line as written, for a token kept in clear

    @property
    def identity(self) -> str:
        return f"{self.kind}:{self.name}"

    def may(self, role: str) -> bool:
        return ANY_ROLE in self.roles or role in self.roles or "admin" in self.roles

    def line(self) -> str:
        if self.clear:
            return self.clear
        fields = [self.name, f"sha256:{self.digest.hex()}", f"kind={self.kind}",
                  f"roles={','.join(self.roles)}", f"created={self.created}"]
        if self.revoked:
            fields.append(f"revoked={self.revoked}")
        return " ".join(fields)


def digest_of(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def check_name(name: str) -> str:
    if not _NAME.match(name) or name == "unix":
        raise TokenFileError(f"the name {name[:140]!r} must be 1 to 128 characters without spaces, ':', '*', "
                             f"'#' or '=', and not 'unix'")
    return name


def check_roles(roles: list[str]) -> tuple[str, ...]:
    unknown = [r for r in roles if r not in (*ROLES, ANY_ROLE)]
    if unknown:
        raise TokenFileError(f"unknown role {unknown[0][:60]!r}: expected one of {', '.join(ROLES)} or *")
    return tuple(dict.fromkeys(roles)) or (ANY_ROLE,)


def parse(text: str, where: str = "key file", *, require_names: bool = False) -> list[Key]:
    """Every line of a key file, in order. A line that does not read is an error naming it: a key
    file half understood would let the wrong people in or keep the right ones out."""
    keys: list[Key] = []
    seen: set[str] = set()
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key = _parse_line(line, f"{where}:{lineno}", lineno, require_names)
        if key.name in seen and key.kind != LEGACY:
            raise TokenFileError(f"{where}:{lineno}: a second key named {key.name!r}")
        seen.add(key.name)
        keys.append(key)
    return keys


def _parse_line(line: str, at: str, lineno: int, require_names: bool) -> Key:
    parts = line.split()
    if len(parts) >= 3:
        return _parse_hashed(parts, at)
    if len(parts) == 1 and require_names:
        raise TokenFileError(f"{at}: expected 'person token'")
    name, token = (parts[0], parts[1]) if len(parts) == 2 else (f"token-{lineno}", parts[0])
    if ":" in name or name == "unix":
        # `token:NAME` must never read as another kind of identity (`mtls:...`, `unix`)
        raise TokenFileError(f"{at}: the caller name {name!r} may not contain ':' or be 'unix'")
    if len(token) < MIN_TOKEN:
        raise TokenFileError(f"{at}: token shorter than {MIN_TOKEN} characters")
    if token.startswith("sha256:"):
        # a hashed line cut short (`NAME sha256:HASH`) must not make its hash a password anyone
        # who can read the file could send
        raise TokenFileError(f"{at}: a hashed key without its kind, roles and created fields")
    return Key(name, LEGACY, digest_of(token), clear=line)


def _parse_hashed(parts: list[str], at: str) -> Key:
    name, hashed, *rest = parts
    try:
        check_name(name)
    except TokenFileError as exc:
        raise TokenFileError(f"{at}: {exc}") from None
    found = _HASHED.match(hashed)
    if not found:
        raise TokenFileError(f"{at}: expected 'NAME sha256:<64 hex> kind=... roles=... created=...'")
    fields: dict[str, str] = {}
    for part in rest:
        field, eq, value = part.partition("=")
        if not eq or field not in ("kind", "roles", "created", "revoked") or field in fields:
            raise TokenFileError(f"{at}: unexpected {part[:60]!r}")
        fields[field] = value
    if fields.get("kind") not in (*KINDS, LEGACY):
        raise TokenFileError(f"{at}: kind must be person, service or token")
    try:
        roles = check_roles([r for r in fields.get("roles", "").split(",") if r])
    except TokenFileError as exc:
        raise TokenFileError(f"{at}: {exc}") from None
    return Key(name, fields["kind"], bytes.fromhex(found.group(1)), roles, fields.get("created", ""),
               fields.get("revoked", ""))


def read(path: Path, *, require_names: bool = False) -> list[Key]:
    """The file's keys; a file others could write or read is refused (warden/private.py)."""
    try:
        text = read_trusted_text(path, "token file", secret=True)
    except UntrustedFileError as exc:
        raise TokenFileError(str(exc)) from None
    return parse(text, str(path), require_names=require_names)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[list[Key]]:
    """The file's keys under an exclusive lock (two `keys add` at once each see the other's)."""
    private_folder(path.parent)
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield read(path, require_names=True) if path.exists() else []
    finally:
        os.close(fd)


def _write(path: Path, keys: list[Key], header: str) -> None:
    text = header + "".join(f"{key.line()}\n" for key in keys)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
        raise
    fsync_path(path.parent)


HEADER = ("# warden keys: `warden keys add|list|revoke` edit this file; clients send `authorization: Bearer <token>`.\n"
          "# NAME sha256:HASH kind= roles= created= [revoked=]   (a line `NAME TOKEN` keeps a token in clear)\n")


def add(path: Path, name: str, kind: str, roles: list[str]) -> tuple[Key, str]:
    """A new key named `name`: returns it and its token, which is shown once and kept nowhere."""
    check_name(name)
    if kind not in KINDS:
        raise TokenFileError(f"kind must be person or service, not {kind[:40]!r}")
    granted = check_roles(roles)
    with _locked(path) as keys:
        if any(k.name == name for k in keys):
            raise TokenFileError(f"{path}: a key named {name!r} exists (revoked keys keep their name); "
                                 f"choose another name")
        token = secrets.token_urlsafe(32)
        key = Key(name, kind, digest_of(token), granted, _now())
        _write(path, [*keys, key], HEADER)
    return key, token


def revoke(path: Path, name: str) -> Key:
    """Mark the key revoked; a token kept in clear is replaced by its hash, marked revoked."""
    with _locked(path) as keys:
        found = [k for k in keys if k.name == name]
        if not found:
            raise TokenFileError(f"{path}: no key named {name[:140]!r}")
        if all(k.revoked for k in found):
            return found[0]
        revoked_at = _now()
        changed: list[Key] = []
        for key in keys:
            if key.name == name and not key.revoked:
                # a line kept in clear loses its token: only the hash stays, marked revoked
                key = replace(key, clear="", revoked=revoked_at, created=key.created or "-")
            changed.append(key)
        _write(path, changed, HEADER)
        return next(k for k in changed if k.name == name)


def active(keys: list[Key]) -> dict[bytes, Key]:
    """sha256(token) -> its key, for keys that are not revoked."""
    return {key.digest: key for key in keys if not key.revoked}
