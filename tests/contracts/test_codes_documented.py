"""Every stable decision code is documented, and the documentation names no code that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from warden import codes

DOC = Path(__file__).resolve().parents[2] / "docs" / "codes.md"


def test_every_decision_code_is_documented():
    table = DOC.read_text().split("## Driver")[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M))
    assert documented == set(codes.DECISION_CODES)


def test_design_minimum_codes_exist():
    required = """invalid_request unknown_agent unknown_agent_version unknown_tool invalid_arguments
    tool_not_allowed wildcard_in_background agent_management_tool access_not_allowed image_out_of_scope
    node_out_of_scope connection_out_of_scope subject_out_of_scope subject_off_limits rule_denied
    approval_required plan_step_not_allowed delegation_depth delegation_children delegation_tree_size
    delegation_cycle policy_error audit_unavailable""".split()
    required += [f"breaker_{b}" for b in ("tokens", "turns", "turns_total", "tool_calls", "wall_clock",
                                         "repetition", "failures", "drift", "tree_budget", "spend", "provider")]
    assert set(required) <= codes.DECISION_CODES


def test_the_http_doors_codes_are_documented():
    section = DOC.read_text().split("## Checkpoint HTTP door")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    assert documented == set(codes.HTTP_DOOR_CODES)


def test_the_policy_bundles_codes_are_documented():
    section = DOC.read_text().split("## Policy bundles")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    assert documented == set(codes.BUNDLE_CODES)


def test_the_mcp_gateways_codes_are_documented():
    from warden.mcp import codes as gateway_codes

    section = DOC.read_text().split("## MCP gateway and hooks")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    ours = {v for k, v in vars(gateway_codes).items() if k.isupper() and isinstance(v, str)}
    assert ours <= documented, sorted(ours - documented)


def test_the_retention_codes_are_documented():
    section = DOC.read_text().split("## Decision log retention")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", section, flags=re.M))
    assert documented == set(codes.RETENTION_CODES)
