"""Sealed segments of the decision log and their manifest (docs/audit.md, "Retention").

Beside the live file `decisions.db` is a folder `decisions.d/` holding read-only SQLite files
`segment-000001.db`, ... (each the `decisions` table of the seqs it sealed, in the schema they were
written in) and `manifest.jsonl`, one signed JSON line per act:

- a seal: the segment's number, file, first and last seq, the prev_hash of its first record and
  the hash of its last, its last record's time, the sha256 of the file, its schema, and the live
  head when it was sealed (kept in the live file: a signed anchor for the live part);
- a prune: the segment's number; its file is then deleted, its seal line (its sealed head) stays.

Each line is signed with the head-signing Ed25519 key (checkpoint/audit/heads.py) over the RFC 8785
canonical JSON of every other field. The manifest is the authority on what is sealed: a record
whose seq it lists as sealed is read from its segment, never from the live file (where it may
linger after a crash between sealing and deleting), so no record is ever read or counted twice.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from checkpoint.audit.record import GENESIS_HASH
from warden import canonical

FOLDER_SUFFIX = ".d"
MANIFEST = "manifest.jsonl"
FORMAT_VERSION = 1


class ManifestError(ValueError):
    """The manifest cannot be read as one (a line that is no manifest entry)."""


def folder(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + FOLDER_SUFFIX)


def manifest_path(log_path: Path) -> Path:
    return folder(log_path) / MANIFEST


def segment_name(number: int) -> str:
    return f"segment-{number:06d}.db"


@dataclass(frozen=True)
class Seal:
    number: int
    file: str
    first_seq: int
    last_seq: int
    first_prev_hash: str
    last_hash: str
    last_time: str
    records: int
    sha256: str
    schema: int
    kept_seq: int  # the live file's head when this segment was sealed: it stays in the live file
    kept_hash: str
    sealed_at: str
    key_id: str
    signature: str = ""
    kind: str = "seal"
    v: int = FORMAT_VERSION


@dataclass(frozen=True)
class Prune:
    number: int
    pruned_at: str
    key_id: str
    signature: str = ""
    kind: str = "prune"
    v: int = FORMAT_VERSION


Entry = Seal | Prune


def _unsigned(entry: Entry) -> dict[str, Any]:
    body = asdict(entry)
    body.pop("signature")
    return body


def signed_bytes(entry: Entry) -> bytes:
    return canonical.dumps(_unsigned(entry))


def sign(entry: Entry, key: Ed25519PrivateKey) -> Entry:
    signature = key.sign(signed_bytes(entry)).hex()
    return type(entry)(**{**asdict(entry), "signature": signature})


def verifies(entry: Entry, public: Ed25519PublicKey, public_key_id: str) -> bool:
    if entry.key_id != public_key_id:
        return False
    try:
        public.verify(bytes.fromhex(entry.signature), signed_bytes(entry))
    except (InvalidSignature, ValueError):
        return False
    return True


def line(entry: Entry) -> str:
    return json.dumps(asdict(entry), separators=(",", ":"), sort_keys=True)


def _entry(data: Any) -> Entry:
    if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
        raise ValueError("not a manifest entry of format v1")
    kind = data.get("kind")
    cls: type[Seal] | type[Prune]
    if kind == "seal":
        cls = Seal
    elif kind == "prune":
        cls = Prune
    else:
        raise ValueError(f"unknown manifest entry kind {kind!r}")
    try:
        entry = cls(**data)
    except TypeError as exc:
        raise ValueError(f"not a {kind} entry: {exc}") from None
    for name, kind_of in cls.__annotations__.items():
        want = int if kind_of == "int" else str
        if type(getattr(entry, name)) is not want:
            raise ValueError(f"{kind} entry field {name} is not {want.__name__}")
    return entry


@dataclass
class Manifest:
    """What the manifest says: sealed segments in order, which of them were pruned."""

    seals: list[Seal] = field(default_factory=list)
    prunes: dict[int, Prune] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    torn: bool = False  # the last line was cut off (a crash while it was appended): not counted

    @property
    def sealed_last(self) -> int:
        """The last sealed seq (0: nothing sealed): records up to it are read from segments only."""
        return self.seals[-1].last_seq if self.seals else 0

    @property
    def sealed_head(self) -> tuple[int, str] | None:
        return (self.seals[-1].last_seq, self.seals[-1].last_hash) if self.seals else None

    @property
    def next_number(self) -> int:
        return self.seals[-1].number + 1 if self.seals else 1

    def pruned(self, seal: Seal) -> bool:
        return seal.number in self.prunes

    @property
    def start(self) -> tuple[int, str]:
        """The head the remaining chain continues from: the last pruned segment's sealed head when
        a prefix of segments was pruned, else (0, genesis)."""
        head = (0, GENESIS_HASH)
        for seal in self.seals:
            if not self.pruned(seal):
                break
            head = (seal.last_seq, seal.last_hash)
        return head

    def present(self) -> list[Seal]:
        return [seal for seal in self.seals if not self.pruned(seal)]

    def segment_for(self, seq: int) -> Seal | None:
        for seal in self.seals:
            if seal.first_seq <= seq <= seal.last_seq:
                return seal
        return None


def read_manifest(log_path: Path) -> Manifest:
    """The manifest beside the log (empty when there is none). A cut-off last line is a seal or
    prune that did not finish (checkpoint/audit/rotate.py repairs it); any other line that is no
    entry raises ManifestError."""
    path = manifest_path(log_path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Manifest()
    manifest = Manifest()
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        manifest.torn = True
    for number, text in enumerate(lines[:-1], 1):
        if not text.strip():
            continue
        try:
            entry = _entry(json.loads(text))
        except ValueError as exc:
            raise ManifestError(f"{path}:{number}: {exc}") from None
        manifest.entries.append(entry)
        if isinstance(entry, Seal):
            manifest.seals.append(entry)
        else:
            manifest.prunes[entry.number] = entry
    return manifest


def append_entry(log_path: Path, entry: Entry) -> None:
    """Append one line and fsync it: once this returns, the act is on the record."""
    path = manifest_path(log_path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, (line(entry) + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
