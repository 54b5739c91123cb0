"""Signed heads: the checkpoint's Ed25519 signature over the log's head, now and then.

The hash chain catches an edited record, but records deleted from the end (or every record
rewritten and rehashed from some point on) leave a chain that is still whole. A head (seq, hash)
kept where the attacker cannot write catches both; a *signed* head also proves where it came
from, so an auditor can collect them from anywhere (a ticket, a SIEM, a mail) and trust them.

- The key: Ed25519, `audit-head.key` in the data folder (PKCS#8 PEM, 0600, made on first use).
  Asymmetric on purpose: an auditor holds only the public key (`warden audit pubkey`) and can
  check heads without being able to make one. A head is signed once a minute at most (and on
  shutdown), off the decision path, so Ed25519's cost (tens of microseconds) does not matter.
- The heads: one JSON line each in `decisions.heads.jsonl` beside the log (0600), appended.
  `warden audit anchors` prints them; `warden audit verify --anchors FILE --pubkey PEM` checks
  each signature and then that the log still holds every anchored (seq, hash).
- The signed bytes: RFC 8785 canonical JSON of {"v": 1, "seq", "hash", "time", "key_id"}
  (`signed_bytes`), so any language can check a head (docs/audit.md, "Signed heads").
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from checkpoint.audit.record import now as now_text
from checkpoint.audit.verify import Anchor
from warden import canonical
from warden.private import FILE_MODE, private_folder, read_trusted
from warden.token_keys import key_id, public_pem  # noqa: F401 - also the heads' key's id and text

log = logging.getLogger(__name__)

KEY_FILE = "audit-head.key"
HEADS_SUFFIX = ".heads.jsonl"
DEFAULT_INTERVAL_SECONDS = 60.0
FORMAT_VERSION = 1


def key_path(log_path: Path) -> Path:
    return log_path.parent / KEY_FILE


def heads_path(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + HEADS_SUFFIX)


def load_or_create_key(path: Path) -> Ed25519PrivateKey:
    """The head-signing key at `path`; made (0600, never overwritten) when there is none."""
    if not path.exists():
        private_folder(path.parent)
        pem = Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:  # another process made it first: use theirs
            pass
        else:
            with os.fdopen(fd, "wb") as f:
                f.write(pem)
    key = serialization.load_pem_private_key(read_trusted(path, "head-signing key", secret=True), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """A public key PEM (`warden audit pubkey`), or the private key file itself."""
    # whoever could swap this key could sign heads that hide a cut log
    data = read_trusted(path, "head-signing key")
    if b"PRIVATE KEY" in data:
        private = serialization.load_pem_private_key(data, password=None)
        if not isinstance(private, Ed25519PrivateKey):
            raise ValueError(f"{path}: not an Ed25519 key")
        return private.public_key()
    public = serialization.load_pem_public_key(data)
    if not isinstance(public, Ed25519PublicKey):
        raise ValueError(f"{path}: not an Ed25519 public key")
    return public


def signed_bytes(seq: int, hash: str, time: str, key_id: str) -> bytes:
    return canonical.dumps({"v": FORMAT_VERSION, "seq": seq, "hash": hash, "time": time, "key_id": key_id})


@dataclass(frozen=True)
class SignedHead:
    seq: int
    hash: str
    time: str  # when it was signed, RFC 3339 UTC
    key_id: str
    signature: str  # hex Ed25519 signature over signed_bytes(...)
    v: int = FORMAT_VERSION

    def line(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, data: Any) -> SignedHead:
        if not isinstance(data, dict):
            raise ValueError("a signed head is a JSON object")
        try:
            head = cls(int(data["seq"]), str(data["hash"]), str(data["time"]), str(data["key_id"]),
                       str(data["signature"]), int(data.get("v", FORMAT_VERSION)))  # fmt: skip
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a signed head: {exc}") from None
        if head.v != FORMAT_VERSION:
            raise ValueError(f"signed head format v{head.v} is not known (this warden reads v{FORMAT_VERSION})")
        return head

    def verifies(self, public: Ed25519PublicKey) -> bool:
        if self.key_id != key_id(public):
            return False
        try:
            public.verify(bytes.fromhex(self.signature), signed_bytes(self.seq, self.hash, self.time, self.key_id))
        except (InvalidSignature, ValueError):
            return False
        return True

    def anchor(self, name: str) -> Anchor:
        return Anchor(self.seq, self.hash, f"{name} (seq {self.seq}, signed {self.time})")


def read_heads(path: Path) -> list[SignedHead]:
    """Signed heads, one JSON object a line (`warden audit anchors` output, or the heads file)."""
    heads = []
    for number, text in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if text.strip():
            try:
                heads.append(SignedHead.from_json(json.loads(text)))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
    return heads


class HeadSigner:
    """Signs the log's head every `interval` seconds (when it moved) and once more on `close()`."""

    def __init__(
        self,
        head: Callable[[], tuple[int, str]],
        log_path: Path,
        *,
        interval: float | None = DEFAULT_INTERVAL_SECONDS,
    ):
        self._head = head
        self._key = load_or_create_key(key_path(log_path))
        self._key_id = key_id(self._key.public_key())
        self.path = heads_path(log_path)
        self._interval = interval
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: tuple[int, str] | None = None
        with contextlib.suppress(FileNotFoundError, ValueError):
            heads = read_heads(self.path)
            if heads:
                self._last = (heads[-1].seq, heads[-1].hash)

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self._key.public_key()

    def sign_now(self) -> SignedHead | None:
        """Sign and append the current head; None when it is the one signed last (or the log is empty)."""
        with self._lock:
            seq, digest = self._head()
            if seq == 0 or (seq, digest) == self._last:
                return None
            time = now_text()
            signature = self._key.sign(signed_bytes(seq, digest, time, self._key_id)).hex()
            head = SignedHead(seq, digest, time, self._key_id, signature)
            private_folder(self.path.parent)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(head.line() + "\n")
                f.flush()
                os.fsync(f.fileno())
            self._last = (seq, digest)
            return head

    def start(self) -> HeadSigner:
        if self._interval and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="audit-head-signer", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        assert self._interval
        while not self._stop.wait(self._interval):
            try:
                self.sign_now()
            except Exception:  # a failed signature must not stop the next one
                log.exception("signing the decision log's head failed")

    def close(self) -> tuple[int, str] | None:
        """Stop the timer and sign the last head (call before the log closes); the (seq, hash) signed
        last, None when no head was signed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        try:
            self.sign_now()
        except Exception:
            log.exception("signing the decision log's head at shutdown failed")
        return self._last
