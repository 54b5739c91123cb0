"""Policy files: the schema (model), strict loading (loader), the compiled set, the version catalog."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.policy.catalog import AgentCatalog
    from checkpoint.policy.errors import PolicyError, PolicyLoadError
    from checkpoint.policy.loader import load_policy_dir
    from checkpoint.policy.policyset import AgentVersion, CompiledRule, CompiledTool, PolicySet

# Imported on first use, so a command's --help does not load what only its work needs.
_WHERE = {
    "AgentCatalog": "checkpoint.policy.catalog",
    "PolicyError": "checkpoint.policy.errors",
    "PolicyLoadError": "checkpoint.policy.errors",
    "load_policy_dir": "checkpoint.policy.loader",
    "AgentVersion": "checkpoint.policy.policyset",
    "CompiledRule": "checkpoint.policy.policyset",
    "CompiledTool": "checkpoint.policy.policyset",
    "PolicySet": "checkpoint.policy.policyset",
}

__all__ = [
    "AgentCatalog",
    "AgentVersion",
    "CompiledRule",
    "CompiledTool",
    "PolicyError",
    "PolicyLoadError",
    "PolicySet",
    "load_policy_dir",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
