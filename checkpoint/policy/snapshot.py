"""`warden policy apply`: a policy set installed as a whole, so a checkpoint never loads half of one.

A running checkpoint's folder is never edited in place. The new set is copied into a snapshot
folder of its own beside the link (`LINK.versions/TIME-REVISION/`), with a manifest of the digests
of its files (`SHA256SUMS`, as `sha256sum` writes it); the snapshot is loaded as the checkpoint
would load it; only then is the link pointed at it, by renaming a new link over the old one (one
atomic step). So what the link names is always a complete set, and the loader refuses a folder
whose files differ from its manifest (checkpoint/policy/loader/manifest.py, `check_manifest`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.loader import MANIFEST, load_policy_dir
from warden.private import fsync_path

VERSIONS_SUFFIX = ".versions"


class ApplyError(Exception):
    """The set cannot be applied for a reason outside the policy files (the link, the folders)."""


@dataclass(frozen=True)
class Applied:
    revision: str
    snapshot: str  # the link's new target, as written in the link
    previous: str | None  # the old target, or None on first use


def policy_folder_files(source: Path) -> list[Path]:
    """Every regular file under `source`, hidden ones left out as the loader leaves them out."""
    return sorted(p for p in source.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(source).parts)
                  and p.relative_to(source).as_posix() != MANIFEST)


def apply(source: str | Path, link: str | Path, *, cel_engine: str = "native") -> Applied:
    """Snapshot `source` beside `link`, check it loads, then switch `link` to it atomically.
    PolicyLoadError when the set does not load (nothing switched, the snapshot removed)."""
    source, link = Path(source), Path(link)
    if not source.is_dir():
        raise ApplyError(f"{source} is not a folder")
    if link.exists() and not link.is_symlink():
        raise ApplyError(f"{link} is a folder, not a link: `apply` switches a link so that a checkpoint never reads "
                         f"a set while it is written. Move the folder aside and apply it: `mv {link} {link}.orig && "
                         f"warden policy apply {link}.orig --policies {link}`")
    versions = link.parent / (link.name + VERSIONS_SUFFIX)
    versions.mkdir(parents=True, exist_ok=True)
    staging = versions / f".staging-{os.getpid()}-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        sums = []
        for path in policy_folder_files(source):
            name = path.relative_to(source).as_posix()
            data = path.read_bytes()
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            sums.append(f"{hashlib.sha256(data).hexdigest()}  {name}\n")
        with open(staging / MANIFEST, "w", encoding="utf-8") as f:
            f.write("".join(sums))
            f.flush()
            os.fsync(f.fileno())
        # the snapshot as the checkpoint will read it, manifest included; a set that does not
        # load is never switched to
        policies = load_policy_dir(staging, catalog=AgentCatalog(None), cel_engine=cel_engine)
        for folder in sorted({p.parent for p in staging.rglob("*")} | {staging}, key=lambda p: -len(p.parts)):
            fsync_path(folder)
        name = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{policies.revision}"
        final = versions / name
        if final.exists():
            final = versions / f"{name}-{secrets.token_hex(2)}"
        os.rename(staging, final)
        fsync_path(versions)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    previous = os.readlink(link) if link.is_symlink() else None
    target_text = os.path.relpath(final, link.parent)
    new_link = link.parent / f".{link.name}.switch-{os.getpid()}-{secrets.token_hex(4)}"
    os.symlink(target_text, new_link)
    try:
        os.replace(new_link, link)  # rename(2): readers see the old target or the new, never neither
    except BaseException:
        new_link.unlink(missing_ok=True)
        raise
    fsync_path(link.parent)
    return Applied(policies.revision, target_text, previous)
