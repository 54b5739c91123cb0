"""Typed CEL at load: rule variables with declared fields, `args` typed from the input
schemas of the tools a rule names, non-bool conditions refused, errors with file:line, a code
frame and a "did you mean"; and `now`, the checkpoint's clock, which only decide()'s caller sets.

Every load test runs under both engines: the check does not depend on the engine, so both accept
exactly the same rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from ckpt_helpers import ENGINES, build, outcome

from checkpoint.cel.typed import ListOf, Obj
from checkpoint.engine import decide
from checkpoint.policy import PolicyLoadError, load_policy_dir
from checkpoint.policy.celtypes import RULE_SHAPES
from checkpoint.policy.loader import RULE_VARIABLES
from checkpoint.policylint import warnings
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]
BERLIN_SUMMER = timezone(timedelta(hours=2))
MONDAY_10 = datetime(2024, 6, 3, 10, 0, tzinfo=BERLIN_SUMMER)  # Monday, 10:00 in Berlin
MONDAY_18 = datetime(2024, 6, 3, 18, 0, tzinfo=BERLIN_SUMMER)
SATURDAY_10 = datetime(2024, 6, 8, 10, 0, tzinfo=BERLIN_SUMMER)

FILES = {
    "instance.yaml": "kind: Instance\n",
    "tenant.yaml": "kind: Tenant\nname: acme\nroles: {admin: [alice], operator: [bob]}\n",
    "tools.yaml": """kind: Tool
name: deploy
access: write
input_schema:
  type: object
  additionalProperties: false
  required: [service]
  properties:
    service: {type: string}
    replicas: {type: integer}
    amount: {type: number}
    dry_run: {type: boolean}
    regions: {type: array, items: {type: string}}
    labels: {type: object}
---
kind: Tool
name: restart
access: write
input_schema:
  type: object
  additionalProperties: false
  required: [service]
  properties:
    service: {type: string}
    force: {type: boolean}
    replicas: {type: string}
""",
    "agents.yaml": """kind: Agent
name: ops
tenant: acme
persona: p
allowlist: [deploy, restart]
scope: {access: [write]}
delegates: [helper]
---
kind: Agent
name: helper
tenant: acme
persona: p
allowlist: [restart]
scope: {access: [write]}
""",
}


def folder(tmp_path: Path, rules: str, extra: dict[str, str] | None = None) -> Path:
    root = tmp_path / "p"
    for name, text in {**FILES, "rules.yaml": rules, **(extra or {})}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def rule(condition: str, tools: str = "", name: str = "r", extra: str = "") -> str:
    named = f"tools: [{tools}]\n" if tools else ""
    return f"kind: Rule\nname: {name}\neffect: deny_if\n{named}{extra}condition: '{condition}'\n"


def load_errors(root: Path, engine: str) -> list[str]:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(root, cel_engine=engine)
    return [str(e) for e in info.value.errors]


# -- the three typos of the issue, and a condition that is not a bool ---------------------------

TYPOS = [
    # (id, condition, tools, the message, the suggestion, caret column)
    ("field-typo", 'tool.acess == "write"', "", "tool has no field 'acess'", "(did you mean 'access'?)", 6),
    ("argument-typo", 'args.servcie == "db"', "deploy", "args has no field 'servcie': not a property of the "
     "input_schema of deploy", "(did you mean 'service'?)", 6),
    ("string-vs-number", "args.service > 5", "deploy", "'>' does not apply to (string, int): args.service is string",
     "", 14),
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("condition, tools, message, suggestion, column",
                         [pytest.param(*t[1:], id=t[0]) for t in TYPOS])
def test_each_typo_of_the_issue_fails_at_load_with_file_line_frame_and_suggestion(
        tmp_path, engine, condition, tools, message, suggestion, column):
    root = folder(tmp_path, "# a comment first\n" + rule(condition, tools))
    (error,) = load_errors(root, engine)
    line = 6 if tools else 5  # the condition's line
    headline, code, caret = error.split("\n")
    assert headline.startswith(f"{root / 'rules.yaml'}:{line}: rule 'r' condition: CEL does not compile: 1:{column}: ")
    assert message in headline
    assert headline.endswith(suggestion) if suggestion else "did you mean" not in headline
    assert code == f"    | {condition}"
    assert caret.index("^") == len("    | ") + column - 1


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("condition, tools, returns", [
    ("args.amount", "deploy", "DYN"),  # a JSON number: int or double, so dyn
    ("run.inputs.approved", "", "DYN"),
    ("args.replicas + 1", "deploy", "INT"),
    ("args.service", "deploy", "STRING"),
    ("args.regions", "deploy", "LIST<STRING>"),
    ("args.anything", "", "DYN"),  # a rule naming no tools: args is a map of dyn
])
def test_a_condition_whose_type_is_not_bool_fails_at_load(tmp_path, engine, condition, tools, returns):
    (error,) = load_errors(folder(tmp_path, rule(condition, tools)), engine)
    assert f"rule 'r' condition: CEL returns {returns}" in error and error.endswith("it must return BOOL")


def test_a_dyn_result_says_how_to_make_it_a_bool(tmp_path):
    (error,) = load_errors(folder(tmp_path, rule("args.anything")), "native")
    assert "compare it, e.g. `== true`" in error


@pytest.mark.parametrize("engine", ENGINES)
def test_a_multi_line_condition_names_the_line_of_the_problem(tmp_path, engine):
    text = ("kind: Rule\nname: r\neffect: deny_if\ntools: [deploy]\ncondition: |\n"
            '  args.service == "db" &&\n    args.replcas > 3\n')
    (error,) = load_errors(folder(tmp_path, text), engine)
    assert error.startswith(f"{tmp_path / 'p' / 'rules.yaml'}:7: rule 'r' condition: CEL does not compile: 2:8: ")
    assert "(did you mean 'replicas'?)" in error and "\n    |   args.replcas > 3\n    |        ^~~~~~~" in error


@pytest.mark.parametrize("engine", ENGINES)
def test_every_problem_of_every_rule_is_reported_at_once(tmp_path, engine):
    rules = rule("tool.acess == 1 || args.replicas > 1.5", "deploy", "a") + "---\n" + rule("agnet.name == 1", "", "b")
    errors = load_errors(folder(tmp_path, rules), engine)
    assert len(errors) == 3
    assert any("(did you mean 'access'?)" in e for e in errors)
    assert any("args.replicas is int" in e for e in errors)
    assert any("unknown variable 'agnet' (did you mean 'agent'?)" in e for e in errors)


@pytest.mark.parametrize("engine", ENGINES)
def test_touches_are_typed_from_the_tools_own_schema(tmp_path, engine):
    tool = ("kind: Tool\nname: scan\naccess: read\ninput_schema: {type: object, properties: {target: {type: string}}}\n"
            "touches:\n  subjects: '[args.targte]'\n")
    (error,) = load_errors(folder(tmp_path, rule("true"), {"scan.yaml": tool}), engine)
    assert "scan.yaml:6: tool 'scan' touches.subjects: CEL does not compile" in error
    assert "(did you mean 'target'?)" in error


@pytest.mark.parametrize("engine", ENGINES)
def test_a_misspelt_time_zone_fails_at_load(tmp_path, engine):
    (error,) = load_errors(folder(tmp_path, rule('now.getHours("Europe/Berln") < 9')), engine)
    assert "unknown time zone 'Europe/Berln' (did you mean 'Europe/Berlin'?)" in error


# -- what loads, and decides as before ----------------------------------------------------------

GUARD = ('args.service == "payments" || (has(args.replicas) && args.replicas > 10) || '
         '(has(args.amount) && args.amount > 500) || (has(args.regions) && "cn" in args.regions)')
CALLS: list[tuple[dict[str, Any], str]] = [
    ({"service": "web"}, "ALLOW"),
    ({"service": "payments"}, "DENY"),
    ({"service": "web", "replicas": 11}, "DENY"),
    ({"service": "web", "replicas": 10}, "ALLOW"),
    ({"service": "web", "amount": 600}, "DENY"),  # a whole number reaches CEL as an int
    ({"service": "web", "amount": 500.5}, "DENY"),  # ... and a fraction as a double: both compare
    ({"service": "web", "amount": 499.5}, "ALLOW"),
    ({"service": "web", "regions": ["eu", "cn"]}, "DENY"),
]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_correct_typed_rule_loads_and_decides_as_the_untyped_one(tmp_path, engine):
    typed = load_policy_dir(folder(tmp_path / "typed", rule(GUARD, "deploy")), cel_engine=engine)
    untyped = load_policy_dir(folder(tmp_path / "untyped", rule(GUARD)), cel_engine=engine)
    for args, verdict in CALLS:
        got = [outcome(p, build(p, chain=["ops"], tool="deploy", args=args)) for p in (typed, untyped)]
        assert [(o.verdict, o.code) for o in got] == [(verdict, "rule_denied" if verdict == "DENY" else "allowed")] * 2


@pytest.mark.parametrize("engine", ENGINES)
def test_args_of_several_tools_is_every_property_of_any_of_them(tmp_path, engine):
    # replicas is an integer in deploy and a string in restart: dyn for a rule naming both
    both = 'has(args.force) && args.force || has(args.replicas) && args.replicas == "3"'
    policies = load_policy_dir(folder(tmp_path, rule(both, "deploy, restart")), cel_engine=engine)
    p = build(policies, chain=["ops"], tool="restart", args={"service": "a", "replicas": "3"})
    assert outcome(policies, p).verdict == "DENY"
    (error,) = load_errors(folder(tmp_path / "x", rule('args.forse == "x"', "deploy, restart")), engine)
    assert "not a property of the input_schema of deploy or restart (did you mean 'force'?)" in error
    (error,) = load_errors(folder(tmp_path / "y", rule('args.replicas == "3"', "deploy")), engine)
    assert "args.replicas is int" in error


SCAN = """kind: Tool
name: scan
access: write
input_schema:
  type: object
  properties:
    hosts: {type: [string, array], items: {type: string}}
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rule_over_a_value_of_another_shape_than_it_expects_refuses_under_both_engines(tmp_path, engine):
    """`hosts` may be one host or a list; a rule written for the list, given the string, is a CEL
    error (the native runtime has no exists() over a string), so the call is refused. cel-python
    iterated the string's characters, found no 'prod' among them and allowed the call."""
    agents = FILES["agents.yaml"].replace("allowlist: [deploy, restart]", "allowlist: [deploy, restart, scan]")
    root = folder(tmp_path, rule('args.hosts.exists(h, h == "prod")', "scan"),
                  {"scan.yaml": SCAN, "agents.yaml": agents})
    policies = load_policy_dir(root, cel_engine=engine)
    got = [outcome(policies, build(policies, chain=["ops"], tool="scan", args={"hosts": hosts}))
           for hosts in (["prod"], "prod", ["dev"])]
    assert [(o.verdict, o.code) for o in got] == [("DENY", "rule_denied"), ("DENY", "policy_error"), ("ALLOW", "allowed")]


@pytest.mark.parametrize("engine", ENGINES)
def test_rules_naming_no_tools_read_args_as_a_map_and_the_check_warns(tmp_path, engine):
    policies = load_policy_dir(folder(tmp_path, rule('has(args.servcie) && args.servcie == "x"')), cel_engine=engine)
    (warning,) = warnings(policies)
    assert warning.startswith("rule 'r' (") and "reads args without naming its tools" in warning


@pytest.mark.parametrize("engine", ENGINES)
def test_a_schema_that_cannot_be_read_as_fields_leaves_args_a_map_and_warns(tmp_path, engine):
    tool = ("kind: Tool\nname: odd\naccess: write\ninput_schema:\n  type: object\n"
            "  properties: {max-retries: {type: integer}}\n")
    policies = load_policy_dir(folder(tmp_path, rule('args["max-retries"] > 3', "odd"), {"odd.yaml": tool}),
                               cel_engine=engine)
    (warning,) = warnings(policies)
    assert "tool 'odd' cannot be typed: 'max-retries' cannot be read as a field" in warning


@pytest.mark.parametrize("engine", ENGINES)
def test_the_shipped_policies_load_unchanged_and_typed(engine):
    policies = load_policy_dir(REPO / "policies", cel_engine=engine)
    assert len(policies.rules) == 6 and warnings(policies) == []
    assert all(r.program.source == r.spec.condition for r in policies.rules)


# -- the shapes are what decide() fills ---------------------------------------------------------


def test_every_declared_field_is_what_decide_fills(tmp_path):
    rules = "---\n".join([
        rule("has(tool.name) && has(agent.name) && has(run.mode) && has(person.name) && has(counters.drift) "
             "&& size(subjects) >= 0 && now > timestamp(\"2000-01-01T00:00:00Z\") && action == \"\" && false",
             name="a"),
        rule("has(model.name) && false", name="b", extra="actions: [model_call]\n"),
        rule("has(delegation.agent) && false", name="c", extra="actions: [delegation]\n"),
        rule("plan.exists(s, has(s.id)) && false", name="d", extra="actions: [plan]\n"),
    ])
    policies = load_policy_dir(folder(tmp_path, rules))
    seen: dict[str, dict[str, Any]] = {}
    prepare = policies.prepare_rule_activation

    def spy(variables: dict[str, Any]) -> Any:
        seen[variables["action"]] = variables
        return prepare(variables)

    policies.prepare_rule_activation = spy
    requests = [dict(tool="deploy", args={"service": "web"}), dict(model={"provider": "a", "model": "m"}),
                dict(delegation={"agent": "helper"}), dict(plan=[{"id": "s1", "tool": "restart"}])]
    for kw in requests:
        assert outcome(policies, build(policies, chain=["ops"], person="alice", **kw)).verdict != "DENY"
    assert set(seen) == {"tool_call", "model_call", "delegation", "plan"}
    assert set(RULE_SHAPES) == set(RULE_VARIABLES)
    filled = {"tool": "tool_call", "agent": "tool_call", "run": "tool_call", "person": "tool_call",
              "counters": "tool_call", "model": "model_call", "delegation": "delegation"}
    for name, action in filled.items():
        shape = RULE_SHAPES[name]
        assert isinstance(shape, Obj)
        assert list(seen[action][name]) == shape.field_names(), name
    plan = RULE_SHAPES["plan"]
    assert isinstance(plan, ListOf) and isinstance(plan.item, Obj)
    assert list(seen["plan"]["plan"][0]) == plan.item.field_names()
    assert seen["tool_call"]["person"] == {"name": "alice", "roles": ["admin", "approver", "operator", "auditor"]}


@pytest.mark.parametrize("engine", ENGINES)
def test_person_roles_come_from_the_tenant(tmp_path, engine):
    policies = load_policy_dir(folder(tmp_path, rule('!("admin" in person.roles)', "deploy")), cel_engine=engine)
    for person, verdict in (("alice", "ALLOW"), ("bob", "DENY"), ("mallory", "DENY")):
        request = build(policies, chain=["ops"], person=person, tool="deploy", args={"service": "web"})
        assert outcome(policies, request).verdict == verdict, person


# -- now: the checkpoint's clock --------------------------------------------------------------

BUSINESS_HOURS = ('!(now.getDayOfWeek("Europe/Berlin") in [1, 2, 3, 4, 5] && '
                  'now.getHours("Europe/Berlin") >= 9 && now.getHours("Europe/Berlin") < 17)')


@pytest.mark.parametrize("engine", ENGINES)
def test_a_business_hours_rule_decides_by_the_time_given(tmp_path, engine):
    policies = load_policy_dir(folder(tmp_path, rule(BUSINESS_HOURS, "deploy")), cel_engine=engine)
    request = build(policies, chain=["ops"], tool="deploy", args={"service": "web"})
    at = {when: pb.Verdict.Name(decide(policies, request, now=when).verdict) for when in
          (MONDAY_10, MONDAY_18, SATURDAY_10, MONDAY_10.astimezone(UTC), datetime(2024, 6, 3, 6, 59, tzinfo=UTC))}
    assert at == {MONDAY_10: "VERDICT_ALLOW", MONDAY_18: "VERDICT_DENY", SATURDAY_10: "VERDICT_DENY",
                  datetime(2024, 6, 3, 6, 59, tzinfo=UTC): "VERDICT_DENY"}  # 08:59 in Berlin
    winter = datetime(2024, 12, 2, 8, 30, tzinfo=UTC)  # Monday 09:30 in Berlin (UTC+1)
    assert decide(policies, request, now=winter).verdict == pb.VERDICT_ALLOW


@pytest.mark.parametrize("engine", ENGINES)
def test_a_caller_cannot_set_now(tmp_path, engine):
    policies = load_policy_dir(folder(tmp_path, rule(BUSINESS_HOURS, "deploy")), cel_engine=engine)
    request = build(policies, chain=["ops"], tool="deploy", args={"service": "web"})
    request.run.inputs.update({"now": MONDAY_10.isoformat()})  # the only free-form fields a caller has
    assert decide(policies, request, now=MONDAY_18).code == "rule_denied"

    def fields(descriptor: Any, seen: set[str]) -> set[tuple[str, str]]:
        """(name, message type) of every field a CheckRequest can carry, however deep."""
        if descriptor.full_name in seen:
            return set()
        seen.add(descriptor.full_name)
        out = {(f.name, f.message_type.full_name if f.message_type else "") for f in descriptor.fields}
        for f in descriptor.fields:
            if f.message_type is not None:
                out |= fields(f.message_type, seen)
        return out

    found = fields(pb.CheckRequest.DESCRIPTOR, set())
    assert not [f for f in found if f[0] == "now" or f[1] == "google.protobuf.Timestamp"], found


def test_without_a_time_decide_reads_the_wall_clock(tmp_path):
    policies = load_policy_dir(folder(tmp_path, rule('now > timestamp("2020-01-01T00:00:00Z")', "deploy")))
    request = build(policies, chain=["ops"], tool="deploy", args={"service": "web"})
    assert decide(policies, request).code == "rule_denied"
    assert decide(policies, request, now=datetime(2019, 1, 1, tzinfo=UTC)).code == "allowed"


SUITE = """suite: hours
defaults: {agent: ops, tool: deploy, args: {service: web}}
cases:
  - name: Monday morning in Berlin
    now: "2024-06-03T10:00:00+02:00"
    expect: {verdict: ALLOW, code: allowed}
  - name: Monday evening in Berlin
    now: "2024-06-03T16:30:00Z"
    expect: {verdict: DENY, code: rule_denied}
"""


def test_policy_test_cases_set_now(tmp_path, capsys):
    root = folder(tmp_path, rule(BUSINESS_HOURS, "deploy"), {"tests/hours_test.yaml": SUITE})
    assert main(["policy", "test", str(root)]) == 0, capsys.readouterr()
    assert "2 passed, 0 failed" in capsys.readouterr().out


@pytest.mark.parametrize("written, problem", [
    ("2024-06-03T10:00:00+02:00", "quote it to write it as text"),  # YAML would read a date
    ('"2024-06-03T10:00:00"', "timezone"),  # no offset: which 10:00?
])
def test_a_case_time_must_be_quoted_and_carry_its_offset(tmp_path, capsys, written, problem):
    suite = SUITE.replace('"2024-06-03T10:00:00+02:00"', written)
    root = folder(tmp_path, rule(BUSINESS_HOURS, "deploy"), {"tests/hours_test.yaml": suite})
    assert main(["policy", "test", str(root)]) == 3
    assert problem in capsys.readouterr().err


SAME_SET = [
    ('tool.access == "write"', ""), ('tool.acess == "write"', ""), ("args.service > 5", "deploy"),
    ('args.service.startsWith("db-")', "deploy"), ("args.servcie == 1", ""), ("args.servcie == 1", "deploy"),
    ("args.amount > 500 && args.amount < 1000.0", "deploy"), ("args.replicas > 5.0", "deploy"),
    ('"cn" in args.regions', "deploy"), ("size(args.labels) > 2", "deploy"), ("size(args) > 2", "deploy"),
    ("args.dry_run", "deploy"), ("args.labels", "deploy"), ("run.depth > 0 && run.has_plan", ""),
    ('run.inputs.ticket == "x"', ""), ('"admin" in person.roles', ""), ("counters.run_spend_usd > 5.0", ""),
    ("counters.run_spend_usd > 5", ""), ('plan.exists(s, s.tool == "deploy")', ""), ("model.max_tokens > 1000", ""),
    ('delegation.agent == "helper"', ""), ('now.getHours("Asia/Tokyo") < 6', ""), ("now > 5", ""),
    ("dyn(tool).acess == 1", ""), ("1 + 2", ""),
]


def test_both_engines_accept_exactly_the_same_rules(tmp_path):
    rules = "---\n".join(rule(c, t, name=f"r{i}") for i, (c, t) in enumerate(SAME_SET))
    root = folder(tmp_path, rules)
    native, python = (sorted(load_errors(root, engine)) for engine in ENGINES)
    assert native == python
    refused = {int(e.split("rule 'r")[1].split("'")[0]) for e in native}
    assert refused == {1, 2, 5, 7, 10, 12, 17, 22, 24}, [SAME_SET[i][0] for i in sorted(refused)]
