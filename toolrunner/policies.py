"""Where the runner's tool definitions come from, and reloading them when a grant says they changed.

A grant names the `policy_revision` it was issued under. The runner runs only the definitions of
that same revision: running a grant with the command of another revision would run something the
checkpoint never decided. The folder's revision is the same content hash the checkpoint computes
(`warden.policyfiles.revision_of`), so hashing the files tells whether a reload can help. The runner
reads only the Tool documents (`warden.tools.read_tools`): it compiles no rule and no CEL, and a
folder the checkpoint refuses to load is never a revision any grant names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warden.policyfiles import read_policy_files, revision_of
from warden.tools import Tool, ToolReadError, read_tools


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
        """Read the folder's tool definitions; raises ToolReadError (every problem, file:line)."""
        if not self.directory.is_dir():
            raise ToolReadError([f"{self.directory}:0: not a directory"])
        try:
            contents = read_policy_files(self.directory)
        except OSError as exc:
            raise ToolReadError([f"{exc.filename or self.directory}:1: cannot be read: {exc.strerror or exc}"]) from exc
        return LoadedTools(revision_of(contents), read_tools(contents, str(self.directory)))
