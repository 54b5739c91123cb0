"""Which toolrunner this is, the same across its restarts.

Every claim in the receipt store names the instance that made it. When a toolrunner starts it turns
the claims that it, in an earlier life, left running into `interrupted` receipts; on a store that
other toolrunners share, theirs are not its to touch. So the name must outlive the process: it is
`--instance` when given (a StatefulSet's pod name, a host name), else a name made at the first
start and kept in the data folder.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from warden.private import FILE_MODE, private_folder

INSTANCE_FILE = "toolrunner.instance"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class InstanceNameError(ValueError):
    code = "invalid_instance"


def checked(name: str, where: str = "--instance") -> str:
    if not _NAME.fullmatch(name):
        raise InstanceNameError(
            f"{where}: {name[:80]!r} is not an instance name (1 to 63 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit)"
        )
    return name


def instance_of(data_dir: str | Path, given: str | None = None) -> str:
    """`given` when set, else the name kept in DATA/toolrunner.instance, made there on first use."""
    if given:
        return checked(given)
    path = Path(data_dir) / INSTANCE_FILE
    try:
        return checked(path.read_text().strip(), str(path))
    except FileNotFoundError:
        pass
    private_folder(path.parent)
    name = f"tr-{uuid.uuid4().hex[:12]}"
    # written whole under another name, then linked: a process reading the file never sees it half made
    draft = path.with_name(f".{INSTANCE_FILE}.{os.getpid()}.{uuid.uuid4().hex[:6]}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "w") as out:
        out.write(name + "\n")
    try:
        os.link(draft, path)
    except FileExistsError:  # another process of this data folder made it first: its name is ours
        return checked(path.read_text().strip(), str(path))
    finally:
        draft.unlink()
    return name
