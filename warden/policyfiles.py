"""The files of a policy folder and the revision that names them: what every process reads.

The checkpoint compiles these files; the toolrunner reads its tool definitions from the same files
and must name the same revision, so both take the list, the bytes and the hash from here.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

MAX_FILE_BYTES = 1024 * 1024
TEST_SUFFIXES = ("_test.yaml", "_test.yml")


def policy_files(directory: Path) -> list[Path]:
    """The policy files: *.yaml / *.yml, not tests, and nothing hidden (a dot file or folder is
    where an edit is written before `mv` puts it in place). A name that is not a folder is listed
    even when it is no regular file (a symlink whose target is gone, a FIFO): reading it is then
    an error, never a file silently left out (an off-limits list behind a broken link would widen)."""
    return sorted(
        p
        for p in directory.rglob("*")
        if p.suffix in (".yaml", ".yml") and not p.name.endswith(TEST_SUFFIXES)
        and not any(part.startswith(".") for part in p.relative_to(directory).parts) and not p.is_dir()
    )


def revision_of(contents: list[tuple[str, bytes]]) -> str:
    """The folder's content address: each file's path (relative to the folder) and bytes, in order."""
    digest = hashlib.sha256()
    for name, data in contents:
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()[:16]


def read_file(path: Path) -> bytes:
    """A policy file's bytes, at most one more than the cap (which tells a file over it); OSError
    for a name that is no regular file."""
    if not path.is_file():  # checked before opening: opening a FIFO would wait for a writer
        what = "a symlink whose target is missing" if path.is_symlink() and not path.exists() else "not a regular file"
        raise OSError(errno.EINVAL, what, str(path))
    with open(path, "rb") as f:
        return f.read(MAX_FILE_BYTES + 1)  # one byte more tells a file over the cap


def read_policy_files(root: Path) -> list[tuple[str, bytes]]:
    """The folder's policy files as (path relative to it, bytes), in folder order; OSError when
    one cannot be read."""
    return [(str(path.relative_to(root)), read_file(path)) for path in policy_files(root)]
