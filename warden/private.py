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
