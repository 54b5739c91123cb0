"""Limits across runs in the policy files (the Instance's `limits`): every bad input a load error with
file:line; the decision step that refuses a call without room left; `limits.NAME` typed for rules
and read alike by both CEL engines. The store and the service around it: tests/server/test_limits*.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from ckpt_helpers import ENGINES, build
from test_ckpt_typed_rules import FILES

from checkpoint.engine import decide
from checkpoint.policy import PolicyLoadError, load_policy_dir
from checkpoint.policy.limits import UNITS_PER_USD, LimitUsage, Use
from checkpoint.policy.pinned import load as load_pinned
from warden.checkpoint.v1 import checkpoint_pb2 as pb

PRICES = "model_prices:\n  m1: {input_per_mtok_usd: 3, output_per_mtok_usd: 15}\n"
GOOD = """  - name: deploys_hourly
    counts: calls
    tools: [deploy]
    per: principal
    window: 1h
    max: 2
  - name: tenant_daily_spend
    counts: spend
    per: tenant
    window: 24h
    max: 1.5
"""


def folder(tmp_path: Path, limits: str = GOOD, rules: str = "", prices: str = PRICES) -> Path:
    root = tmp_path / "p"
    files = {**FILES, "instance.yaml": f"kind: Instance\n{prices}limits:\n{limits}",
             "rules.yaml": rules or "kind: Rule\nname: never\neffect: deny_if\ncondition: 'false'\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def errors_of(root: Path, engine: str = "native") -> list[str]:
    with pytest.raises(PolicyLoadError) as info:
        load_policy_dir(root, cel_engine=engine)
    return [str(e) for e in info.value.errors]


ONE = "  - {name: n, counts: calls, tools: [deploy], per: principal, window: 1h, max: 2%s}\n"
# (id, the limit's text, the instance.yaml line of the problem, what the message says)
BAD = [
    ("unknown-key", ONE % ", scope: all", 5, "scope"),
    ("window-unit", ONE.replace("1h", "1w") % "", 5, "window"),
    ("window-zero", ONE.replace("1h", "0h") % "", 5, "window"),
    ("window-too-long", ONE.replace("1h", "32d") % "", 5, "longer than the longest kept, 31d"),
    ("negative-max", ONE.replace("max: 2", "max: -1") % "", 5, "max"),
    ("fractional-calls", ONE.replace("max: 2", "max: 2.5") % "", 5, "max must be a whole number"),
    ("nan-max", ONE.replace("max: 2", "max: .nan") % "", 5, "max"),
    ("per-unknown", ONE.replace("principal", "run") % "", 5, "per"),
    ("counts-unknown", ONE.replace("calls", "tokens") % "", 5, "counts"),
    ("verdict-unknown", ONE % ", verdict: require_approval", 5, "verdict"),
    ("name-not-a-cel-field", ONE.replace("name: n", "name: fetch-hourly") % "", 5, "name"),
    ("unknown-tool", ONE.replace("[deploy]", "[deploy, deploi]") % "", 5, "names unknown tool 'deploi'"),
    ("tool-other-case", ONE.replace("[deploy]", "[Deploy]") % "", 5, "limits.0.tools.0: String should match"),
    ("tool-twice", ONE.replace("[deploy]", "[deploy, deploy]") % "", 5, "names tool 'deploy' twice"),
    ("stable-code", ONE % ", code: allowed", 5, "code 'allowed' is a stable code"),
    ("breaker-code", ONE % ", code: breaker_spend", 5, "code 'breaker_spend' is a stable code"),
    ("spend-with-tools", "  - {name: s, counts: spend, tools: [deploy], per: tenant, window: 24h, max: 5}\n", 5,
     "'tools' only applies to calls"),
    ("defined-twice", ONE % "" + ONE % "", 6, "limit 'n' is defined twice (first at line 5)"),
]


@pytest.mark.parametrize("text, line, says", [pytest.param(*b[1:], id=b[0]) for b in BAD])
def test_each_bad_limit_is_a_load_error_with_file_and_line(tmp_path, text, line, says):
    root = folder(tmp_path, text)
    errors = errors_of(root)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{root / 'instance.yaml'}:{line}: "), errors[0]
    assert says in errors[0], errors[0]


def test_a_spend_limit_needs_prices_to_count_by(tmp_path):
    (error,) = errors_of(folder(tmp_path, prices=""))
    assert error.startswith(f"{tmp_path / 'p' / 'instance.yaml'}:10: limit 'tenant_daily_spend' counts spend, but")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("condition, says", [
    ("limits.deploys_hourli.used > 1", "(did you mean 'deploys_hourly'?)"),
    ("limits.deploys_hourly.used > 1.5", "'>' does not apply to (int, double)"),
    ("limits.tenant_daily_spend.remaining < 1", "'<' does not apply to (double, int)"),
    ("limits.deploys_hourly.left > 1", "has no field 'left'"),
])
def test_a_rule_naming_a_limit_is_typed_at_load(tmp_path, engine, condition, says):
    rules = f"kind: Rule\nname: r\neffect: deny_if\ncondition: '{condition}'\n"
    errors = errors_of(folder(tmp_path, rules=rules), engine)
    assert all(f"{tmp_path / 'p' / 'rules.yaml'}:4: rule 'r' condition: CEL does not compile" in e for e in errors)
    assert any(says in e for e in errors), errors


def test_limits_compile_to_units_and_index_by_tool(tmp_path):
    limits = load_policy_dir(folder(tmp_path)).limits
    hourly, spend = limits.limits
    assert (hourly.window, hourly.max_units, hourly.code) == (3600, 2, "limit_exceeded")
    assert (spend.window, spend.max_units) == (86400, 1_500_000)
    assert limits.by_tool == {"deploy": (hourly,)} and limits.spend == (spend,)
    p = load_policy_dir(folder(tmp_path))
    assert limits.applying(build(p, chain=["ops"], tool="deploy", args={"service": "w"})) == (hourly,)
    assert limits.applying(build(p, chain=["ops"], tool="restart", args={"service": "w"})) == ()
    model = build(p, chain=["ops"], model={"provider": "a", "model": "m1", "max_tokens": 1000, "input_tokens": 2000})
    assert limits.applying(model) == (spend,)
    assert limits.amount(spend, model) == 2000 * 3 + 1000 * 15  # millionths of a USD: 0.021 USD
    # a model without a price is priced at the highest listed one, never free
    other = build(p, chain=["ops"], model={"provider": "a", "model": "m9", "max_tokens": 1000, "input_tokens": 0})
    assert limits.amount(spend, other) == 15_000


def _usage(p, used: int, amount: int = 1) -> LimitUsage:
    hourly = p.limits.limits[0]
    return LimitUsage((Use(hourly, "principal:driver", 0, used, amount),))


def _decide(p, request, usage: LimitUsage) -> pb.CheckResponse:
    return decide(p, request, pinned=load_pinned(p, request), limits=usage, now=datetime(2026, 1, 1, tzinfo=UTC))


@pytest.mark.parametrize("engine", ENGINES)
def test_a_call_without_room_left_is_refused_by_the_limit(tmp_path, engine):
    p = load_policy_dir(folder(tmp_path), cel_engine=engine)
    request = build(p, chain=["ops"], tool="deploy", args={"service": "web"})
    assert _decide(p, request, _usage(p, used=1)).verdict == pb.VERDICT_ALLOW
    refused = _decide(p, request, _usage(p, used=2))
    assert (refused.verdict, refused.code, refused.rule) == (pb.VERDICT_DENY, "limit_exceeded", "limit:deploys_hourly")
    assert "deploys_hourly 2/2 per principal:driver in 1h is reached" in refused.reason
    # a limit that does not count this call's party (amount 0) never refuses it
    assert _decide(p, request, _usage(p, used=9, amount=0)).verdict == pb.VERDICT_ALLOW


def test_a_limit_answers_with_its_own_verdict_and_code(tmp_path):
    p = load_policy_dir(folder(tmp_path, ONE % ", verdict: halt, code: deploy_quota"))
    refused = _decide(p, build(p, chain=["ops"], tool="deploy", args={"service": "web"}), _usage(p, used=2))
    assert (refused.verdict, refused.code, refused.rule) == (pb.VERDICT_HALT, "deploy_quota", "limit:n")


def test_a_deny_rule_comes_before_the_limit_and_a_breaker_halts_before_it(tmp_path):
    rules = "kind: Rule\nname: no_db\neffect: deny_if\ntools: [deploy]\ncondition: 'args.service == \"db\"'\n"
    p = load_policy_dir(folder(tmp_path, rules=rules))
    denied = _decide(p, build(p, chain=["ops"], tool="deploy", args={"service": "db"}), _usage(p, used=2))
    assert denied.code == "rule_denied"
    halted = _decide(p, build(p, chain=["ops"], tool="deploy", args={"service": "web"},
                              counters={"turn_tool_calls": 99}), _usage(p, used=2))
    assert halted.code == "breaker_tool_calls"


@pytest.mark.parametrize("engine", ENGINES)
def test_rules_read_the_counts_alike_in_both_engines(tmp_path, engine):
    rules = ("kind: Rule\nname: last_one_needs_a_person\neffect: approve_if\ntools: [deploy]\n"
             "condition: 'limits.deploys_hourly.remaining <= 1 && limits.tenant_daily_spend.used < 1.0'\n")
    p = load_policy_dir(folder(tmp_path, rules=rules), cel_engine=engine)
    hourly, spend = p.limits.limits
    request = build(p, chain=["ops"], tool="deploy", args={"service": "web"})

    def usage(used: int, spent_usd: float) -> LimitUsage:
        return LimitUsage((Use(hourly, "principal:driver", 0, used, 1),
                           Use(spend, "tenant:acme", 0, round(spent_usd * UNITS_PER_USD), 0)))

    assert _decide(p, request, usage(0, 0.5)).verdict == pb.VERDICT_ALLOW
    assert _decide(p, request, usage(1, 0.5)).verdict == pb.VERDICT_REQUIRE_APPROVAL
    assert _decide(p, request, usage(1, 1.25)).verdict == pb.VERDICT_ALLOW
    # a rule that reads a limit the service did not load fails closed, never open
    missing = _decide(p, request, LimitUsage())
    assert (missing.verdict, missing.code) == (pb.VERDICT_DENY, "policy_error")
