"""Where the runner's tool definitions come from, and reloading them when a grant says they changed.

A grant names the `policy_revision` it was issued under. The runner runs only the definitions of
that same revision: running a grant with the command of another revision would run something the
checkpoint never decided. The folder's revision is the same content hash the checkpoint computes
(`checkpoint.policy.loader.revision_of`), so hashing the files tells whether a reload can help.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checkpoint.policy.loader import load_policy_dir, read_policy_files, revision_of
from checkpoint.policy.model import Tool


def tool_specs(tools: Mapping[str, Any]) -> dict[str, Tool]:
    """Name -> tool model. A loaded PolicySet holds compiled tools (the model under `.spec`);
    tests and embedders may hand over the models themselves."""
    return {name: getattr(t, "spec", t) for name, t in tools.items()}


@dataclass(frozen=True)
class LoadedTools:
    revision: str
    tools: dict[str, Tool]


class PolicySource:
    """A policy folder the runner loads its tools from."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def revision(self) -> str:
        """The folder's revision now, without compiling anything."""
        return revision_of(read_policy_files(self.directory))

    def load(self) -> LoadedTools:
        """Load and compile the folder; raises PolicyLoadError (every error, file:line)."""
        policies = load_policy_dir(self.directory)
        return LoadedTools(policies.revision, tool_specs(policies.tools))
