"""A policy folder read: its files, each once, checked against its manifest when it has one."""

from __future__ import annotations

import os
from pathlib import Path

from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.errors import PolicyError, PolicyLoadError
from checkpoint.policy.loader.files import load_policy_files
from checkpoint.policy.loader.manifest import check_manifest
from checkpoint.policy.policyset import PolicySet
from warden.policyfiles import policy_files, read_file


def load_policy_dir(
    directory: str | Path, *, catalog: AgentCatalog | None = None, cel_engine: str = "native"
) -> PolicySet:
    """Load, validate and compile every policy file under `directory`; raise PolicyLoadError.

    Each file is read once: the bytes compiled are the bytes the revision names, and the catalog
    keeps them, so a run pinned to this revision can be decided by it after later edits."""
    root = Path(directory)
    if not root.is_dir():
        raise PolicyLoadError([PolicyError(str(root), 0, "not a directory")])
    contents: list[tuple[str, bytes]] = []
    unread: list[PolicyError] = []
    for path in policy_files(root):
        name = str(path.relative_to(root))
        try:
            contents.append((name, read_file(path)))
        except OSError as exc:
            unread.append(PolicyError(os.path.join(str(directory), name), 1, f"cannot be read: {exc.strerror or exc}"))
    unread.extend(check_manifest(root, str(directory), contents))
    return load_policy_files(contents, str(directory), catalog=catalog, cel_engine=cel_engine, unread=unread)
