"""The Ed25519 keys that sign run and approval tokens, and the published set that verifies them.

Tokens are signed with a private key only the checkpoint holds and verified with its public key,
so any process (the driver, a service in another language) can check one without being able to
make one. Every token names the id of the key that signed it, and a verifier accepts any key of
the published set: a new key is made active while the old one still verifies the tokens it
signed, and the old one is retired once those runs are over. No restart either way.

On disk, in the data folder: `token-keys/<key id>.key` (PKCS#8 PEM, 0600, one a key) and
`token-keys/active` (the id of the key that signs). The first use makes the folder and one key.
`warden keys rotate` adds a key and makes it active; `warden keys retire KEY_ID` removes one
(never the active one). Each process looks at the folder's modification time when it signs and
when it checks a token, a stat of a few microseconds, and reads the folder again when it moved:
a rotation or retirement by any process reaches every worker at its next token.

A key id is the first 16 hex digits of the SHA-256 of the raw public key, as for the log's heads.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from warden.filelock import SharedLock
from warden.private import FILE_MODE, private_folder

FOLDER = "token-keys"
ACTIVE_FILE = "active"
SUFFIX = ".key"
RACY_NS = 1_000_000_000


def key_id(public: Ed25519PublicKey) -> str:
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def public_pem(public: Ed25519PublicKey) -> str:
    return public.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def load_public_pem(pem: str) -> Ed25519PublicKey:
    public = serialization.load_pem_public_key(pem.encode("ascii"))
    if not isinstance(public, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return public


@dataclass(frozen=True)
class PublishedKey:
    key_id: str
    public_key: Ed25519PublicKey
    active: bool

    @property
    def pem(self) -> str:
        return public_pem(self.public_key)


class KeySet:
    """One active signing key and every key that verifies. `folder` None: one key in memory only
    (a checkpoint without a data folder, and tests). Thread-safe."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder is not None else None
        self._lock = threading.Lock()
        self._stamp: int | None = None
        self._keys: dict[str, Ed25519PrivateKey] = {}
        self._public: dict[str, Ed25519PublicKey] = {}  # derived once: deriving costs more than a check
        self._active = ""
        if self.folder is None:
            key = Ed25519PrivateKey.generate()
            self._active = key_id(key.public_key())
            self._keys = {self._active: key}
            self._public = {self._active: key.public_key()}
        else:
            ensure(self.folder)
            self._refresh()

    def _moved(self) -> bool:
        assert self.folder is not None
        try:
            return os.stat(self.folder).st_mtime_ns != self._stamp
        except OSError:
            return True

    def _refresh(self) -> None:
        """Read the folder again when it moved (the caller holds no lock)."""
        if self.folder is None or not self._moved():
            return
        with self._lock:
            if not self._moved():
                return
            stamp = os.stat(self.folder).st_mtime_ns  # before the read: a change during it is seen next time
            keys, active = read(self.folder)
            # A folder's time moves in coarse ticks: a change in the same tick as this read would
            # leave it where it is. Until the time read is older than any tick, it is not trusted
            # and the folder is read again on every use (as git treats a racily clean index).
            racy = time.time_ns() - stamp < RACY_NS
            self._public = {kid: key.public_key() for kid, key in keys.items()}
            self._keys, self._active, self._stamp = keys, active, None if racy else stamp

    def signing_key(self) -> tuple[str, Ed25519PrivateKey]:
        self._refresh()
        keys, active = self._keys, self._active
        return active, keys[active]

    def public_key(self, kid: str) -> Ed25519PublicKey | None:
        """The key `kid` names when it is in the set now, else None."""
        self._refresh()
        return self._public.get(kid)

    def published(self) -> list[PublishedKey]:
        """The public set, the active key first."""
        self._refresh()
        keys, active = self._keys, self._active
        return sorted((PublishedKey(kid, key.public_key(), kid == active) for kid, key in keys.items()),
                      key=lambda k: (not k.active, k.key_id))


def _write_key(folder: Path) -> str:
    key = Ed25519PrivateKey.generate()
    kid = key_id(key.public_key())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(folder / f"{kid}{SUFFIX}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
        f.flush()
        os.fsync(f.fileno())
    return kid


def _set_active(folder: Path, kid: str) -> None:
    # written aside and renamed: a reader sees the old id or the new one, never half of one
    tmp = folder / f".{ACTIVE_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as f:
        f.write(kid + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / ACTIVE_FILE)


def ensure(folder: Path) -> None:
    """Make the folder and its first key when there are none (workers racing: one makes it)."""
    private_folder(folder)
    if (folder / ACTIVE_FILE).exists():
        return
    lock = SharedLock(folder.parent / f".{folder.name}.lock")
    try:
        with lock:
            if not (folder / ACTIVE_FILE).exists():
                _set_active(folder, _write_key(folder))
    finally:
        lock.close()


def read(folder: Path) -> tuple[dict[str, Ed25519PrivateKey], str]:
    """The keys in `folder` by id, and the active id. A file that is no Ed25519 key is an error:
    a set that cannot be read whole signs and verifies nothing."""
    keys: dict[str, Ed25519PrivateKey] = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # retired between the listing and the read: it verifies nothing now
            continue
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 private key")
        kid = key_id(key.public_key())
        if path.name != f"{kid}{SUFFIX}":
            raise ValueError(f"{path}: its name is not its key id {kid}")
        keys[kid] = key
    active = (folder / ACTIVE_FILE).read_text(encoding="ascii").strip()
    if active not in keys:
        raise ValueError(f"{folder / ACTIVE_FILE}: the active key {active!r} is not in the folder")
    return keys, active


def rotate(folder: Path) -> str:
    """Add a key and make it the one that signs; the others still verify. Returns its id."""
    ensure(folder)
    lock = SharedLock(folder.parent / f".{folder.name}.lock")
    try:
        with lock:
            kid = _write_key(folder)
            _set_active(folder, kid)
    finally:
        lock.close()
    return kid


def retire(folder: Path, kid: str) -> None:
    """Remove key `kid` from the set: the tokens it signed are refused from the next check on."""
    lock = SharedLock(folder.parent / f".{folder.name}.lock")
    try:
        with lock:
            _, active = read(folder)
            if kid == active:
                raise ValueError(f"key {kid} signs new tokens: rotate first, then retire it")
            path = folder / f"{kid}{SUFFIX}"
            if not path.exists():
                raise ValueError(f"no key {kid!r} in {folder}")
            path.unlink()
    finally:
        lock.close()
