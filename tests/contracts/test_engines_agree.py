"""Differential: every shipped policy test case decided by both CEL engines gives the same answer,
and every CEL expression in the shipped policies evaluates identically on both engines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from checkpoint.cel import Case, differential, get_engine
from checkpoint.engine import decide
from checkpoint.policy import load_policy_dir
from checkpoint.policy.loader import RULE_VARIABLES, TOUCHES_VARIABLES
from checkpoint.policytest import build_request, find_test_files, load_cases

POLICIES = Path(__file__).resolve().parents[2] / "policies"
NATIVE = load_policy_dir(POLICIES, cel_engine="native")
PYTHON = load_policy_dir(POLICIES, cel_engine="python")
CASES = [
    pytest.param(case, id=f"{path.stem}:{case.name[:50]}")
    for path in find_test_files(POLICIES)
    for _, case in load_cases(path, str(path))[1]
]


@pytest.mark.parametrize("case", CASES)
def test_both_engines_decide_every_policy_case_alike(case):
    def answer(policies):
        request = build_request(policies, case)
        request.explain = True
        r = decide(policies, request)
        return r.verdict, r.code, r.rule, r.reason, [(o.rule, o.outcome) for o in r.explanation]

    assert answer(NATIVE) == answer(PYTHON)


def test_every_shipped_expression_evaluates_alike():
    activations = [
        {"args": {}, "action": "tool_call", "tool": {"name": "t", "access": "write"},
         "agent": {"name": "recon"}, "run": {"mode": "background", "tenant": "acme"}, "counters": {},
         "subjects": [], "model": {"name": "claude-opus-4-1"}, "delegation": {}, "plan": []},
        {"args": {"target": "10.20.0.0/24", "template": "intrusive-x", "amount_usd": 501.5, "node": "n",
                  "image": "i", "customer": "customer:jane"},
         "action": "tool_call", "tool": {"name": "t", "access": "read"}, "agent": {"name": "refunds"},
         "run": {"mode": "interactive", "tenant": "acme"}, "counters": {"drift": 2}, "subjects": ["x"],
         "model": {"name": "claude-haiku-4-5"}, "delegation": {}, "plan": []},
        {"args": {"amount_usd": 900, "target": 7}, "action": "tool_call", "tool": {}, "agent": {},
         "run": {"mode": "background"}, "counters": {}, "subjects": [], "model": {"name": "x"},
         "delegation": {}, "plan": []},
    ]
    read = {"kind": "ip", "text": "10.20.0.0/24", "host": "", "address": "10.20.0.0/24", "range": True,
            "scheme": "", "port": 0, "path": "", "name": ""}
    touched = [{}, {"images": [], "nodes": [], "connections": [], "threads": [], "subjects": [read]},
               {"subjects": [{**read, "range": None}]}]
    for i, a in enumerate(activations):  # every declared variable, or every case is the same error
        a.update(person={"name": "alice", "roles": ["operator"]}, touched=touched[i],
                 now=datetime(2024, 6, 3 + i, 8 + 4 * i, 30, tzinfo=UTC),
                 limits={"calls": {"used": i, "remaining": 2 - i, "max": 2}})
    assert set(activations[0]) == set(RULE_VARIABLES)
    cases = []
    for rule in NATIVE.rules:
        cases += [Case(rule.spec.condition, a, RULE_VARIABLES) for a in activations]
    for tool in NATIVE.tools.values():
        for program in tool.touches.values():
            cases += [Case(program.source, {"args": a["args"]}, TOUCHES_VARIABLES) for a in activations]
    assert len(cases) > 20
    assert differential(cases) == []
    native = get_engine("native")
    assert any(native.compile(c.source, c.variables).evaluate(c.activation).error is None for c in cases)
