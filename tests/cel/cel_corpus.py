"""Shared declarations and activations for the CEL tests."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from checkpoint.cel import CelType

# The declarations the policy layer uses for every expression.
POLICY_VARIABLES = {
    "args": CelType.MAP_STRING_DYN,
    "tool": CelType.MAP_STRING_DYN,
    "agent": CelType.MAP_STRING_DYN,
    "run": CelType.MAP_STRING_DYN,
    "counters": CelType.MAP_STRING_DYN,
    "action": CelType.STRING,
    "subjects": CelType.LIST_STRING,
    "now": CelType.TIMESTAMP,
}
# a Sunday, the day summer time starts in Europe (01:00 UTC): 09:30 in Berlin
NOW = datetime(2024, 3, 31, 7, 30, 15, tzinfo=UTC)

_BASE = {
    "args": {
        "amount": 150.0,  # JSON numbers through protobuf Struct are all doubles
        "count": 3,
        "ratio": 2.5,
        "customer": "cus_42",
        "email": "ann@example.com",
        "tags": ["vip", "eu"],
        "items": [{"sku": "a", "qty": 2}, {"sku": "b", "qty": 0}],
        "nested": {"level": {"deep": True}},
        "note": None,
        "mixed": [1, 2.5, "x", None],
        "flag": False,
    },
    "tool": {"name": "issue_refund", "access": "write"},
    "agent": {"name": "support", "version": "v3", "access": ["read", "write"]},
    "run": {"tenant": "acme", "mode": "interactive", "run_id": "r-1", "depth": 0},
    "counters": {"tool_calls": 4, "spend_usd": 1.25},
    "action": "tool_call",
    "subjects": ["customer:cus_42", "order:o-9"],
    "now": NOW,
}


def base_activation(**overrides: object) -> dict[str, object]:
    act = copy.deepcopy(_BASE)
    act.update(overrides)
    return act
