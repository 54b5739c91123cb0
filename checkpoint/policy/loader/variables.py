"""What CEL expressions in policy files may read: a rule's condition and a tool's touches."""

from __future__ import annotations

from checkpoint.cel import CelType

# What a rule's condition may read, as the engines evaluate it (maps); their fields and types
# are declared in celtypes.py, checked at load. Every rule sees every name; values not relevant
# to the action (say `args` on a model call) are empty maps, so `has()` tells them apart.
RULE_VARIABLES: dict[str, CelType] = {
    "action": CelType.STRING,
    "args": CelType.MAP_STRING_DYN,
    "tool": CelType.MAP_STRING_DYN,
    "agent": CelType.MAP_STRING_DYN,
    "run": CelType.MAP_STRING_DYN,
    "counters": CelType.MAP_STRING_DYN,
    "subjects": CelType.LIST_STRING,
    "touched": CelType.MAP_STRING_DYN,
    "model": CelType.MAP_STRING_DYN,
    "delegation": CelType.MAP_STRING_DYN,
    "plan": CelType.LIST_DYN,
    "person": CelType.MAP_STRING_DYN,
    "now": CelType.TIMESTAMP,
    # the counts of the instance's limits for this call's party, read before the decision
    "limits": CelType.MAP_STRING_DYN,
}
TOUCHES_VARIABLES: dict[str, CelType] = {"args": CelType.MAP_STRING_DYN}
