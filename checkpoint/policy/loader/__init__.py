"""Load a policy folder: parse strictly, validate, cross-check, compile. All of it or none.

Every problem found is collected and reported at once, sorted, as `file:line: message`:
an operator fixes a broken edit in one pass, not one error per run.

The steps, one module each: reading a folder (`folder`) and checking its manifest (`manifest`),
parsing its documents (`documents`), compiling them (`compiler`, with `tools` and `agents`) and
settling the result against the catalog (`files`); proposals sent to the checkpoint are checked the
same way (`proposals`).
"""

from __future__ import annotations

from checkpoint.policy.loader.files import load_policy_files
from checkpoint.policy.loader.folder import load_policy_dir
from checkpoint.policy.loader.manifest import MANIFEST, check_manifest
from checkpoint.policy.loader.proposals import load_agent_definition, load_entry_definition
from checkpoint.policy.loader.variables import RULE_VARIABLES, TOUCHES_VARIABLES

__all__ = [
    "MANIFEST",
    "RULE_VARIABLES",
    "TOUCHES_VARIABLES",
    "check_manifest",
    "load_agent_definition",
    "load_entry_definition",
    "load_policy_dir",
    "load_policy_files",
]
