"""Policy files: the schema (model), strict loading (loader), the compiled set, the version catalog."""

from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.errors import PolicyError, PolicyLoadError
from checkpoint.policy.loader import load_policy_dir
from checkpoint.policy.policyset import AgentVersion, CompiledRule, CompiledTool, PolicySet

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
