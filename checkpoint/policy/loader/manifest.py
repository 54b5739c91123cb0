"""A policy folder's manifest of digests: the set loads only when its files are exactly the
ones the manifest names."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from checkpoint.policy.errors import PolicyError
from warden.policyfiles import MAX_FILE_BYTES, read_file

# A manifest of digests in `sha256sum` format: when the folder holds one, the set loads only when
# its files are exactly the ones the manifest names (docs/policies.md, "Applying a whole set").
MANIFEST = "SHA256SUMS"
_MANIFEST_LINE = re.compile(r"([0-9A-Fa-f]{64}) [ *](.+)")


def check_manifest(root: Path, shown: str, contents: list[tuple[str, bytes]]) -> list[PolicyError]:
    """The folder's files against its manifest, when it has one: every policy file listed, with
    the digest of the very bytes read for the load, and every listed file present with its digest.
    A file written halfway, one added or removed after the manifest, is a set that is not whole:
    it is refused (the last good set stays), whatever time passed since the last write."""
    path = root / MANIFEST
    if not path.exists() and not path.is_symlink():
        return []
    where = os.path.join(shown, MANIFEST)
    try:
        raw = read_file(path)
    except OSError as exc:
        return [PolicyError(where, 1, f"cannot be read: {exc.strerror or exc}")]
    if len(raw) > MAX_FILE_BYTES:
        return [PolicyError(where, 1, f"file is larger than {MAX_FILE_BYTES} bytes")]
    errors: list[PolicyError] = []
    listed: dict[str, tuple[str, int]] = {}
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _MANIFEST_LINE.fullmatch(line)
        name = _manifest_name(match[2]) if match else None
        if match is None or name is None:
            errors.append(PolicyError(where, number, "not a `SHA256  PATH` line of a file inside the folder "
                                                     "(the format `sha256sum` writes)"))
            continue
        if name in listed:
            errors.append(PolicyError(where, number, f"{name} is listed twice (first at line {listed[name][1]})"))
            continue
        listed[name] = (match[1].lower(), number)
    read = dict(contents)
    for name, data in contents:
        if name not in listed:
            errors.append(PolicyError(os.path.join(shown, name), 1, f"not in {where}: the set is not whole (a file "
                                      f"added after the manifest was written); `warden policy apply` writes both"))
        elif hashlib.sha256(data).hexdigest() != listed[name][0]:
            errors.append(PolicyError(os.path.join(shown, name), 1, f"its sha256 is not the one {where}:"
                                      f"{listed[name][1]} names: the file is still being written, or changed after "
                                      "the manifest; the last good set stays until both agree"))
    for name, (digest, number) in sorted(listed.items()):
        if name in read:
            continue
        other = root / name
        try:
            if hashlib.sha256(read_file(other)).hexdigest() != digest:
                errors.append(PolicyError(os.path.join(shown, name), 1, f"its sha256 is not the one {where}:{number} "
                                          "names"))
        except OSError:
            errors.append(PolicyError(where, number, f"{name} is listed but missing: the set is not whole"))
    return errors


def _manifest_name(text: str) -> str | None:
    """A listed path, relative to the folder (`./a.yaml` is `a.yaml`); None when it leaves it."""
    from pathlib import PurePosixPath

    path = PurePosixPath(text)
    if path.is_absolute() or not path.parts or ".." in path.parts or "\\" in text:
        return None
    return path.as_posix()
