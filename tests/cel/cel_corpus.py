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
    "touched": CelType.MAP_STRING_DYN,
    "now": CelType.TIMESTAMP,
    "limits": CelType.MAP_STRING_DYN,
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
    # what engine/as_read.py builds for subjects read as a host, a range, a URL and a name
    "touched": {"images": [], "nodes": [], "connections": [], "threads": [], "subjects": [
        {"kind": "host", "text": "X.Bank.Example.", "host": "x.bank.example", "address": "", "range": False,
         "scheme": "", "port": 0, "path": "", "name": ""},
        {"kind": "ip", "text": "::ffff:10.20.0.0/120", "host": "", "address": "10.20.0.0/24", "range": True,
         "scheme": "", "port": 0, "path": "", "name": ""},
        {"kind": "url", "text": "HTTPS://a.example/x/../admin", "host": "a.example", "address": "", "range": False,
         "scheme": "https", "port": 443, "path": "/admin", "name": ""},
        {"kind": "name", "text": "customer:\uff56ip-1", "host": "", "address": "", "range": False,
         "scheme": "", "port": 0, "path": "", "name": "customer:vip-1"},
    ]},
    "now": NOW,
    # the counts of the instance's limits as the service reads them (checkpoint/policy/limits.py):
    # ints for a limit of calls, USD doubles for one of spend
    "limits": {"deploys_hourly": {"used": 4, "remaining": 1, "max": 5},
               "tenant_daily_spend": {"used": 1.25, "remaining": 0.25, "max": 1.5}},
}


def base_activation(**overrides: object) -> dict[str, object]:
    act = copy.deepcopy(_BASE)
    act.update(overrides)
    return act
