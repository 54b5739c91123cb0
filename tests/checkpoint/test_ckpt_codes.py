"""One table row (at least) per stable decision code, and a meta-test that every code is produced.

The meta-test re-runs every table of this folder, so it holds whichever test file is run.
"""

from __future__ import annotations

import pytest
from ckpt_helpers import ENGINES, case, params

from warden import codes

DOC = {"doc": "doc:readme"}

CODE_CASES = [
    # 1. request shape
    case("allowed/read", "ALLOW", "allowed", "allow", chain=["reader"], tool="read_doc", args=DOC),
    case("invalid_request/person-proposes-plan", "DENY", "invalid_request", "request.actor",
         chain=[], plan=[{"id": "s1", "tool": "read_doc"}]),
    case("invalid_request/tenant-mismatch", "DENY", "invalid_request", "request.tenant",
         chain=["reader"], tenant="small", tool="read_doc", args=DOC),
    case("unknown_agent", "DENY", "unknown_agent", "request.agent", chain=["ghost"], tool="read_doc", args=DOC),
    case("unknown_agent_version", "DENY", "unknown_agent_version", "request.agent_version",
         chain=["reader"], versions={"reader": "0000deadbeef"}, tool="read_doc", args=DOC),
    case("unknown_tool", "DENY", "unknown_tool", "request.tool", chain=["reader"], tool="format_disk", args={}),
    case("invalid_arguments/missing", "DENY", "invalid_arguments", "request.arguments",
         chain=["reader"], tool="read_doc", args={}),
    case("invalid_arguments/extra", "DENY", "invalid_arguments", "request.arguments",
         chain=["reader"], tool="read_doc", args={"doc": "doc:a", "sudo": True}),
    case("invalid_arguments/type", "DENY", "invalid_arguments", "request.arguments",
         chain=["reader"], tool="read_doc", args={"doc": 7}),
    # 2. allowlist
    case("tool_not_allowed", "DENY", "tool_not_allowed", "allowlist", chain=["reader"], tool="write_doc", args=DOC),
    case("tool_not_allowed/empty-allowlist", "DENY", "tool_not_allowed", "allowlist",
         chain=["empty"], tool="read_doc", args=DOC),
    case("wildcard_in_background", "DENY", "wildcard_in_background", "allowlist.wildcard",
         chain=["star"], mode="background", tool="read_doc", args=DOC),
    case("wildcard/interactive-allowed", "ALLOW", "allowed", chain=["star"], tool="read_doc", args=DOC),
    case("agent_management_tool/wildcard", "DENY", "agent_management_tool", "allowlist.agent_management",
         chain=["star"], tool="manage", args={"agent": "worker"}),
    case("agent_management_tool/listed-agent", "DENY", "agent_management_tool",
         chain=["worker"], tool="manage", args={"agent": "worker"}),
    case("delegation_not_allowed", "DENY", "delegation_not_allowed", "delegation.allowlist",
         chain=["worker"], delegation={"agent": "reader"}),
    # 3. scope
    case("access_not_allowed/wildcard-read-only", "DENY", "access_not_allowed", "scope.access",
         chain=["star"], tool="write_doc", args=DOC),
    case("access_not_allowed/narrowed", "DENY", "access_not_allowed", "scope.access",
         chain=["worker", "helper"], narrowing={"access": ["read"]}, tool="write_doc", args=DOC),
    case("image_out_of_scope", "DENY", "image_out_of_scope", "scope.images",
         chain=["worker"], tool="connect", args={"url": "https://api.example.com/x", "image": "evil/miner"}),
    case("node_out_of_scope", "DENY", "node_out_of_scope", "scope.nodes",
         chain=["worker"], tool="connect", args={"url": "https://api.example.com/x", "node": "prod-1"}),
    case("thread_in_scope", "ALLOW", "allowed", "allow",
         chain=["worker"], tool="connect", args={"url": "https://api.example.com/x", "thread": "support#42"}),
    case("thread_out_of_scope", "DENY", "thread_out_of_scope", "scope.threads",
         chain=["worker"], tool="connect", args={"url": "https://api.example.com/x", "thread": "finance#1"}),
    case("connection_out_of_scope", "DENY", "connection_out_of_scope", "scope.connections",
         chain=["worker"], tool="connect", args={"url": "https://evil.example.org/"}),
    case("connect/in-scope", "ALLOW", "allowed",
         chain=["worker"], tool="connect",
         args={"url": "https://api.example.com/v1", "node": "node-3", "image": "img/curl"}),
    case("subject_out_of_scope", "DENY", "subject_out_of_scope", "scope.subjects",
         chain=["reader"], tool="read_doc", args={"doc": "other:thing"}),
    # 4. off-limits
    case("subject_off_limits/agent", "DENY", "subject_off_limits", "off_limits",
         chain=["reader"], tool="read_doc", args={"doc": "doc:forbidden-plans"}),
    case("subject_off_limits/in-agent-scope", "DENY", "subject_off_limits", "off_limits",
         chain=["reader"], tool="read_doc", args={"doc": "www.irs.gov"}),
    case("subject_off_limits/person", "DENY", "subject_off_limits", "off_limits",
         chain=[], tool="read_doc", args={"doc": "doc:forbidden-plans"}),
    case("person/direct-call-allowed", "ALLOW", "allowed", chain=[], tool="read_doc", args=DOC),
    # 5. rules
    case("rule_denied/tool", "DENY", "rule_denied", "rule:no-secret-docs",
         chain=["reader"], tool="read_doc", args={"doc": "doc:secret-1"}),
    case("rule_denied/model", "DENY", "rule_denied", "rule:no-forbidden-model",
         chain=["worker"], model={"provider": "p", "model": "forbidden-model"}),
    case("rule_denied/plan", "DENY", "rule_denied", "rule:plans-with-delete-denied",
         chain=["helper"], plan=[{"id": "s1", "tool": "learn_note"}]),
    case("approval_required/tool", "REQUIRE_APPROVAL", "approval_required", "rule:worker-writes-need-approval",
         chain=["worker"], tool="write_doc", args=DOC),
    case("approval/approved", "ALLOW", "allowed",
         chain=["worker"], tool="write_doc", args=DOC, approver="bob"),
    case("approval/no-approver-is-not-approval", "REQUIRE_APPROVAL", "approval_required",
         chain=["worker"], tool="write_doc", args=DOC, approver=""),
    case("approval_required/delegation", "REQUIRE_APPROVAL", "approval_required",
         "rule:background-delegation-needs-approval",
         chain=["worker"], mode="background", delegation={"agent": "helper"}),
    case("policy_error/missing-key", "DENY", "policy_error", "rule:boom-reads-missing-key",
         chain=["worker"], tool="boom", args={}),
    case("policy_error/touches-not-a-list", "DENY", "policy_error", "tool:bad_touches.touches.subjects",
         chain=["worker"], tool="bad_touches", args={"target": "doc:a"}),
    # plans
    case("plan_step_not_allowed", "DENY", "plan_step_not_allowed", "plan.step[1]",
         chain=["reader"], plan=[{"id": "s1", "tool": "read_doc"}, {"id": "s2", "tool": "write_doc"}]),
    # 6. breakers (one row each here; the full at/below/above table is in test_ckpt_breakers)
    *[
        case(f"breaker_{name}", "HALT", f"breaker_{name}", f"breaker.{name}",
             chain=["reader"], model={"provider": "anthropic", "model": "m"}, counters={counter: value})
        for name, counter, value in [("turns", "stretch_turns", 10), ("turns_total", "total_turns", 20)]
    ],
    *[
        case(f"breaker_{name}", "HALT", f"breaker_{name}", f"breaker.{name}",
             chain=["reader"], tool="read_doc", args=DOC, counters={counter: value})
        for name, counter, value in [
            ("tokens", "stretch_tokens", 1000),
            ("tool_calls", "turn_tool_calls", 5), ("wall_clock", "wall_clock_seconds", 60),
            ("repetition", "identical_calls", 3), ("failures", "consecutive_failures", 4), ("drift", "drift", 2),
            ("tree_budget", "tree_tokens", 5000), ("spend", "run_spend_usd", 2.5),
            ("provider", "provider_refusals", 2),
        ]
    ],
    # 7. delegation
    case("delegation/allowed", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper"}),
    case("delegation_cycle", "DENY", "delegation_cycle", "delegation.cycle",
         chain=["a", "b"], delegation={"agent": "a"}),
    case("delegation_depth", "DENY", "delegation_depth", "delegation.depth",
         chain=["d0", "d1", "d2", "d3"], delegation={"agent": "d4"}),
    case("delegation_children", "DENY", "delegation_children", "delegation.children",
         chain=["worker"], delegation={"agent": "helper"}, counters={"children": 5}),
    case("delegation_tree_size", "DENY", "delegation_tree_size", "delegation.tree_size",
         chain=["worker"], delegation={"agent": "helper"}, counters={"tree_runs": 20}),
    case("delegation/unknown-child-version", "DENY", "unknown_agent_version", "delegation.agent",
         chain=["worker"], delegation={"agent": "helper", "agentVersion": "0000"}),
    # shipped policies
    case("shipped/recon-scan", "ALLOW", "allowed", folder="shipped", chain=["recon"],
         tool="create_task_from_template", args={"template": "web-basic", "target": "www.lab.example.com"}),
    case("shipped/refund-approval", "REQUIRE_APPROVAL", "approval_required", folder="shipped", chain=["refunds"],
         tool="propose_refund", args={"invoice_id": "inv-1", "payment_id": "pay_2", "customer": "customer:jane",
                                      "amount_usd": 12, "reason": "dup"}),
    case("shipped/refund-handoff", "HALT", "handoff", "rule:refund-above-500-is-a-handoff", folder="shipped",
         chain=["refunds"], tool="propose_refund",
         args={"invoice_id": "inv-1", "payment_id": "pay_2", "customer": "customer:jane", "amount_usd": 900,
               "reason": "dup"}),
]


@pytest.mark.parametrize("cel_engine", ENGINES)
@pytest.mark.parametrize("c", params(CODE_CASES))
def test_code_table(c, cel_engine):
    c.check(cel_engine)


def test_decision_carries_agent_version_and_revision():
    c = case("x", "ALLOW", "allowed", chain=["reader"], tool="read_doc", args=DOC)
    got = c.check()
    from ckpt_helpers import policies

    p = policies("engine")
    assert got.response.agent == "reader"
    assert got.response.agent_version == p.agents["reader"].version
    assert got.response.policy_revision == p.revision and len(p.revision) == 16


def _all_tables():
    import test_ckpt_bad_requests
    import test_ckpt_breakers
    import test_ckpt_delegation
    import test_ckpt_plans

    return [
        *CODE_CASES,
        *test_ckpt_breakers.BREAKER_CASES,
        *test_ckpt_breakers.NARROWING_CASES,
        *test_ckpt_delegation.DELEGATION_CASES,
        *test_ckpt_plans.PLAN_CASES,
        *test_ckpt_bad_requests.BAD_REQUEST_CASES,
    ]


def test_every_decision_code_is_produced():
    """Every stable code but the service's own (tests/server: audit_unavailable, approval_invalid,
    caller_not_permitted, run_token_invalid, a person's acts approved / rejected / recorded;
    tests/server/test_token_lifetimes.py and test_run_ends.py: run_token_expired, approval_expired,
    run_ended, run_state_unavailable; tests/server/test_catalog_fleet.py: catalog_unavailable; and
    tests/security/test_tenant_roles.py: role_required; the catalog's, which
    tests/security/test_catalog_lifecycle.py produces through the service; the skills' and templates',
    which tests/security/test_skills.py and test_templates.py produce; the learnings', which
    tests/security/test_learnings.py produces; an approval's deadline and its notifications, which
    tests/server/test_approval_deadlines.py and test_notifications.py produce; the limits' across runs, which test_ckpt_limits.py and
    tests/server/test_limits.py produce from counts read beforehand; an act id whose first record is not on the
    log, which tests/server/test_act_id_unrecorded.py produces) comes out of some table row."""
    produced = set()
    for c in _all_tables():
        got = c.run()
        assert (got.verdict, got.code) == (c.verdict, c.code), c.id
        produced.add(got.code)
    wanted = set(codes.DECISION_CODES) - {codes.AUDIT_UNAVAILABLE, codes.APPROVAL_INVALID, codes.CALLER_NOT_PERMITTED,
                                          codes.RUN_TOKEN_INVALID, codes.RUN_TOKEN_EXPIRED, codes.APPROVAL_EXPIRED,
                                          codes.RUN_ENDED, codes.RUN_STATE_UNAVAILABLE, codes.CATALOG_UNAVAILABLE,
                                              codes.STORE_UNAVAILABLE, codes.LIMIT_EXCEEDED, codes.LIMIT_UNAVAILABLE,
                                          codes.APPROVED, codes.REJECTED, codes.RECORDED,
                                          codes.ROLE_REQUIRED, *codes.CATALOG_CODES, *codes.ENTRY_CODES,
                                          *codes.LEARNING_CODES, codes.APPROVAL_TIMED_OUT,
                                          codes.NOTIFICATION_DELIVERED, codes.NOTIFICATION_FAILED,
                                          codes.NOTIFICATION_DROPPED, codes.ACT_ID_UNRECORDED}
    assert wanted - produced == set(), "codes no table row produces"
    assert produced - wanted == set(), "codes produced that are not in DECISION_CODES"
