"""Plans: every step is checked before anything runs; off-plan calls count toward drift."""

from __future__ import annotations

import pytest
from ckpt_helpers import case, params

DOC = {"doc": "doc:readme"}

PLAN_CASES = [
    case("all-steps-inside", "ALLOW", "allowed", chain=["worker"], plan=[
        {"id": "s1", "tool": "read_doc", "args": DOC},
        {"id": "s2", "tool": "connect"},
        {"id": "s3", "tool": "write_doc"},
    ]),
    case("step-off-allowlist", "DENY", "plan_step_not_allowed", "plan.step[1]", chain=["worker"], plan=[
        {"id": "s1", "tool": "read_doc"}, {"id": "s2", "tool": "delete_doc"}]),
    case("step-agent-management", "DENY", "plan_step_not_allowed", "plan.step[0]", chain=["star"], plan=[
        {"id": "s1", "tool": "manage"}]),
    case("step-unknown-tool", "DENY", "plan_step_not_allowed", "plan.step[0]", chain=["worker"], plan=[
        {"id": "s1", "tool": "format_disk"}]),
    case("step-bad-arguments", "DENY", "plan_step_not_allowed", "plan.step[0]", chain=["worker"], plan=[
        {"id": "s1", "tool": "read_doc", "args": {"doc": 5}}]),
    case("step-out-of-scope", "DENY", "plan_step_not_allowed", "plan.step[2]", chain=["worker"], plan=[
        {"id": "s1", "tool": "read_doc"}, {"id": "s2", "tool": "read_doc", "args": DOC},
        {"id": "s3", "tool": "connect", "args": {"url": "https://evil.example.org/"}}]),
    case("step-off-limits", "DENY", "plan_step_not_allowed", "plan.step[0]", chain=["worker"], plan=[
        {"id": "s1", "tool": "read_doc", "args": {"doc": "doc:forbidden-x"}}]),
    case("step-access-narrowed", "DENY", "plan_step_not_allowed", "plan.step[0]", chain=["worker", "helper"],
         narrowing={"access": ["read"]}, plan=[{"id": "s1", "tool": "write_doc"}]),
    case("wildcard-plan-in-background", "DENY", "plan_step_not_allowed", chain=["star"], mode="background",
         plan=[{"id": "s1", "tool": "read_doc"}]),
    case("empty-plan", "DENY", "invalid_request", "plan.shape", chain=["worker"], plan=[]),
    case("101-steps", "DENY", "invalid_request", "plan.shape", chain=["worker"],
         plan=[{"id": f"s{i}", "tool": "read_doc"} for i in range(101)]),
    case("100-steps", "ALLOW", "allowed", chain=["worker"],
         plan=[{"id": f"s{i}", "tool": "read_doc"} for i in range(100)]),
]


@pytest.mark.parametrize("c", params(PLAN_CASES))
def test_plan_table(c):
    c.check()


def test_every_step_is_checked_and_the_first_refusal_is_named():
    got = case("x", "DENY", "plan_step_not_allowed", "plan.step[1]", chain=["worker"], plan=[
        {"id": "fetch", "tool": "read_doc", "args": DOC},
        {"id": "wipe", "tool": "delete_doc"},
        {"id": "peek", "tool": "read_doc", "args": {"doc": "doc:forbidden-1"}},
        {"id": "tidy", "tool": "write_doc"},
    ]).check()
    steps = [(s.step_id, s.index, s.code) for s in got.response.plan_steps]
    assert steps == [
        ("fetch", 0, "allowed"),
        ("wipe", 1, "tool_not_allowed"),
        ("peek", 2, "subject_off_limits"),  # still checked after an earlier refusal
        ("tidy", 3, "allowed"),
    ]
    assert "wipe" in got.reason and "tool_not_allowed" in got.reason
    assert [s.verdict for s in got.response.plan_steps] == [1, 2, 2, 1]


@pytest.mark.parametrize(
    "has_plan, plan_step, drift",
    [
        pytest.param(True, "", True, id="planned-run-no-step-counts-as-drift"),
        pytest.param(True, "s1", False, id="planned-run-names-step"),
        pytest.param(False, "", False, id="unplanned-run-no-drift"),
    ],
)
def test_tool_call_naming_no_plan_step_counts_as_drift(has_plan, plan_step, drift):
    got = case("x", "ALLOW", "allowed", chain=["reader"], tool="read_doc", args=DOC,
               has_plan=has_plan, plan_step=plan_step).check()
    assert got.response.counts_as_drift is drift
