"""Signed policy bundles: a policy folder packed as a tar.gz with a manifest of digests that an
Ed25519 key signs, so a checkpoint can take a new set from a URL or a mounted ConfigMap.

The bundle holds `warden-bundle.json` (the manifest: a format name, a serial, the revision and the
sha256 of every file), `warden-bundle.sig` (the Ed25519 signature of the manifest's exact bytes,
base64) and the folder's files under `policy/`. Nothing in a bundle is trusted before `verify`
has checked, in this order: the caps (packed size, unpacked size, number of files), that every
member is a regular file or folder whose name stays under `policy/`, the signature, that the
files are exactly the ones the manifest lists with its digests, and that the serial is not older
than the one in force (a captured old bundle served again is a rollback). Verification reads the
members into memory and writes nothing: only a bundle that passes is unpacked, by the caller,
into a snapshot the way `warden policy apply` installs a folder (docs/bundles.md).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from checkpoint.policy.snapshot import policy_folder_files
from warden import codes
from warden.policyfiles import read_policy_files, revision_of

FORMAT = "warden-policy-bundle/1"
MANIFEST_NAME = "warden-bundle.json"  # also kept in the installed snapshot: the serial in force
SIGNATURE_NAME = "warden-bundle.sig"
PREFIX = "policy/"
MAX_BUNDLE_BYTES = 8 << 20  # packed: what a fetch reads at most
MAX_UNPACKED_BYTES = 32 << 20
MAX_FILES = 2000


class BundleError(Exception):
    """A bundle refused; `code` is one of warden.codes.BUNDLE_CODES."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{message} [{code}]")
        self.code, self.message = code, message


@dataclass(frozen=True)
class Verified:
    serial: int
    revision: str
    manifest: bytes  # the signed bytes, kept in the snapshot
    files: dict[str, bytes]  # path under the policy folder -> bytes


def build(folder: Path, key: Ed25519PrivateKey, serial: int) -> bytes:
    """The signed bundle of `folder` (its regular files, hidden ones and SHA256SUMS left out)."""
    if serial < 1:
        raise ValueError("the serial must be a positive integer, higher than the bundle in force")
    files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in policy_folder_files(folder)}
    manifest = json.dumps(
        {"format": FORMAT, "serial": serial, "revision": revision_of(read_policy_files(folder)),
         "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "files": {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}},
        sort_keys=True, separators=(",", ":"),
    ).encode()
    signature = base64.b64encode(key.sign(manifest))
    out = io.BytesIO()
    # no owner, mode or clock of the building host in the members: only what the manifest signs
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as packed, \
            tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in [(MANIFEST_NAME, manifest), (SIGNATURE_NAME, signature),
                           *((PREFIX + n, d) for n, d in sorted(files.items()))]:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def verify(data: bytes, public: Ed25519PublicKey, *, in_force: int | None = None,
           in_force_manifest: bytes | None = None) -> Verified:
    """The bundle's files once every check passed; BundleError naming the first that failed.
    `in_force`: the serial of the bundle in force (None: none yet)."""
    members = _read_members(data)
    manifest, signature = members.pop(MANIFEST_NAME, None), members.pop(SIGNATURE_NAME, None)
    if manifest is None or signature is None:
        raise BundleError(codes.BUNDLE_UNSIGNED, f"the bundle has no {MANIFEST_NAME} and {SIGNATURE_NAME}")
    try:
        public.verify(base64.b64decode(signature, validate=True), manifest)
    except (InvalidSignature, ValueError) as exc:
        raise BundleError(codes.BUNDLE_BAD_SIGNATURE, "the manifest's signature does not verify with the "
                          "bundle public key") from exc
    try:
        doc = json.loads(manifest)
        serial, revision, listed = doc["serial"], doc["revision"], doc["files"]
        if doc.get("format") != FORMAT or type(serial) is not int or serial < 1 or not isinstance(listed, dict):
            raise ValueError(doc.get("format"))
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(codes.BUNDLE_MALFORMED, f"the signed manifest is not the {FORMAT} format") from exc
    files = {name[len(PREFIX):]: body for name, body in members.items()}
    if set(files) != set(listed):
        extra, missing = sorted(set(files) - set(listed)), sorted(set(listed) - set(files))
        raise BundleError(codes.BUNDLE_DIGEST_MISMATCH, f"files not as signed: not listed {extra}, missing {missing}")
    for name, body in sorted(files.items()):
        if hashlib.sha256(body).hexdigest() != listed[name]:
            raise BundleError(codes.BUNDLE_DIGEST_MISMATCH, f"{name}: its sha256 is not the one the manifest signs")
    if in_force is not None and (serial < in_force or (serial == in_force and manifest != in_force_manifest)):
        raise BundleError(codes.BUNDLE_ROLLBACK, f"serial {serial} is not newer than serial {in_force} in force")
    return Verified(serial, str(revision), manifest, files)


def _read_members(data: bytes) -> dict[str, bytes]:
    """Every member's bytes, within the caps, each a regular file or a folder under the root."""
    if len(data) > MAX_BUNDLE_BYTES:
        raise BundleError(codes.BUNDLE_TOO_LARGE, f"the bundle is larger than {MAX_BUNDLE_BYTES} bytes")
    out: dict[str, bytes] = {}
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for count, member in enumerate(tar, 1):
                if count > MAX_FILES + 2:
                    raise BundleError(codes.BUNDLE_TOO_LARGE, f"the bundle holds more than {MAX_FILES} files")
                name = _member_name(member.name)
                if member.isdir():
                    continue
                if not member.isreg():  # a symlink, hard link, device or FIFO: never unpacked
                    raise BundleError(codes.BUNDLE_UNSAFE_PATH, f"{member.name!r} is not a regular file")
                total += member.size
                if total > MAX_UNPACKED_BYTES:
                    raise BundleError(codes.BUNDLE_TOO_LARGE, f"the bundle unpacks to more than "
                                      f"{MAX_UNPACKED_BYTES} bytes")
                if name in out:
                    raise BundleError(codes.BUNDLE_MALFORMED, f"{name!r} is in the bundle twice")
                if name not in (MANIFEST_NAME, SIGNATURE_NAME) and not name.startswith(PREFIX):
                    raise BundleError(codes.BUNDLE_UNSAFE_PATH, f"{name!r} is outside {PREFIX}")
                reader = tar.extractfile(member)
                out[name] = reader.read(member.size) if reader is not None else b""
    except BundleError:
        raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise BundleError(codes.BUNDLE_MALFORMED, f"not a gzip tar: {exc}") from exc
    return out


def _member_name(text: str) -> str:
    """A member's name as a relative POSIX path; BundleError when it is absolute or climbs out."""
    path = PurePosixPath(text)
    if path.is_absolute() or ".." in path.parts or "\\" in text or "\0" in text or not path.parts:
        raise BundleError(codes.BUNDLE_UNSAFE_PATH, f"{text!r} escapes the policy folder")
    name = path.as_posix()
    if any(part.startswith(".") for part in PurePosixPath(name[len(PREFIX):]).parts) and name.startswith(PREFIX):
        raise BundleError(codes.BUNDLE_UNSAFE_PATH, f"{text!r} is hidden: the loader would not read it")
    return name
