"""Files only their owner may read: the stores hold who did what, arguments, receipts.

SQLite creates a database as 0644 less the umask, and its -wal and -shm files with the
database's own mode. So the database file is created 0600 before SQLite opens it (an existing one,
and companions left from an earlier run, are tightened), and the folders the stores make are 0700.
A folder that already exists keeps its mode: the operator chose it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

FILE_MODE, FOLDER_MODE = 0o600, 0o700
SQLITE_COMPANIONS = ("", "-wal", "-shm", "-journal")


def private_folder(path: str | Path) -> Path:
    """Make the folder (and missing parents) 0700; an existing folder is left as it is."""
    path = Path(path)
    missing = [p for p in (path, *path.parents) if not p.exists()]
    path.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
    for created in missing:  # mkdir applies the umask, and gives parents the default mode
        with contextlib.suppress(FileNotFoundError):
            os.chmod(created, FOLDER_MODE)
    return path


def private_sqlite(path: str | Path) -> Path:
    """Create the database file 0600 (its folder 0700 when missing) before SQLite opens it."""
    path = Path(path)
    private_folder(path.parent)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))
    for suffix in SQLITE_COMPANIONS:
        with contextlib.suppress(FileNotFoundError, PermissionError):  # another owner's file: theirs
            os.chmod(f"{path}{suffix}", FILE_MODE)
    return path


# -- files warden trusts: settings, keys, tokens --------------------------------------------------

# Who may have written a file warden takes settings or credentials from: the user running warden, or
# root (who can write anything anyway). Another owner, or a group or others who may write it, could
# have swapped its keys, tokens or addresses: the same rule ssh applies to its keys and config and
# git to a repository another user owns (safe.directory).
TRUSTED_CODE = "file_not_trusted"


class UntrustedFileError(ValueError):
    """A settings, key or token file that someone other than the user running warden could have
    written; the message names the file and what to do."""

    code = TRUSTED_CODE


def _owner_name(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_trusted(path: str | Path, st: os.stat_result, what: str, *, secret: bool = False) -> None:
    """Refuse `st` (the file at `path`, as opened) unless only the user running warden (or root)
    can have written it; a `secret` must not be readable by others either."""
    import stat

    me = os.geteuid()
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid not in (me, 0):
        raise UntrustedFileError(
            f"{path}: the {what} is owned by {_owner_name(st.st_uid)}, not by {_owner_name(me)} who runs warden, "
            f"or root: another user could have written it. Check its content, then take it over "
            f"(`chown {me} {path}`), or use a file of your own")
    writers = [who for who, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    if writers:
        raise UntrustedFileError(
            f"{path}: the {what} can be written by {' and '.join(writers)} (mode {mode:04o}): another user "
            f"could have changed it. Check its content, then `chmod go-w {path}`")
    if secret and mode & stat.S_IRWXO:
        raise UntrustedFileError(f"{path}: the {what} must not be readable by others (mode {mode:04o}): "
                                 f"`chmod 600 {path}`")


def read_trusted(path: str | Path, what: str, *, secret: bool = False) -> bytes:
    """The file's bytes, checked with `check_trusted` on the very file read (fstat of the open
    descriptor: a file swapped between a check and the read is the one checked)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        check_trusted(path, os.fstat(fd), what, secret=secret)
        return f.read()


def read_trusted_text(path: str | Path, what: str, *, secret: bool = False) -> str:
    return read_trusted(path, what, secret=secret).decode("utf-8")


def fsync_path(path: Path) -> None:
    """Flush a file or a folder (its entries: a rename or a new file in it) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
