"""Breakers on every call, finite counters and budgets, ceilings that always exist."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.engine import InvalidRequest, decide
from checkpoint.policy import PolicyLoadError, load_policy_dir
from warden.checkpoint.v1 import checkpoint_pb2 as pb

REPO = Path(__file__).resolve().parents[2]
SHIPPED = load_policy_dir(REPO / "policies")
# recon's effective ceilings: its own turns 30, the tenant's turns_total 300 (policies/)
TURNS, TURNS_TOTAL = 30, 300


def request(policies=SHIPPED, *, agent: str = "recon", tenant: str = "acme", **action) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(
        tenant=tenant, run_id="run-1", mode=pb.RUN_MODE_INTERACTIVE,
        actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                     pb.Actor(kind=pb.ACTOR_KIND_AGENT, id=agent,
                              agent_version=policies.agents[agent].version)],
    ))
    if "tool" in action:
        req.tool_call.tool = action.pop("tool")
        req.tool_call.arguments.update(action.pop("args"))
    elif action.pop("model", False):
        req.model_call.provider, req.model_call.model = "anthropic", "claude-haiku-4-5"
    elif "delegate" in action:
        req.delegation.agent = action.pop("delegate")
    assert not action, action
    return req


def tool_call(**counters) -> pb.CheckRequest:
    req = request(tool="get_task", args={"task_id": "task-1"})
    for name, value in counters.items():
        setattr(req.counters, name, value)
    return req


def verdict(req: pb.CheckRequest, policies=SHIPPED) -> tuple[str, str]:
    got = decide(policies, req)
    return pb.Verdict.Name(got.verdict).removeprefix("VERDICT_"), got.code


# -- finite, non-negative counters and budgets ---------------------------------------------------

BAD = [math.nan, math.inf, -math.inf, -1.0]


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "-inf", "negative"])
@pytest.mark.parametrize("field", ["wall_clock_seconds", "run_spend_usd", "owner_spend_today_usd"])
def test_a_counter_that_is_not_finite_or_negative_is_an_invalid_request(field, value):
    with pytest.raises(InvalidRequest) as info:
        decide(SHIPPED, tool_call(**{field: value}))
    assert info.value.code == "invalid_request" and info.value.field == f"counters.{field}"


def test_a_negative_integer_counter_is_an_invalid_request():
    with pytest.raises(InvalidRequest, match="counters.stretch_tokens"):
        decide(SHIPPED, tool_call(stretch_tokens=-10**12))


def test_a_nan_wall_clock_does_not_switch_the_breaker_off():
    # before: NaN >= ceiling is False, so the breaker never tripped; now the request is refused
    assert verdict(tool_call(wall_clock_seconds=3600)) == ("HALT", "breaker_wall_clock")
    with pytest.raises(InvalidRequest):
        decide(SHIPPED, tool_call(wall_clock_seconds=math.nan))


@pytest.mark.parametrize("value", BAD, ids=["nan", "inf", "-inf", "negative"])
@pytest.mark.parametrize("where", ["run.budget", "actor.budget", "delegation.budget"])
def test_a_budget_that_is_not_finite_or_negative_is_an_invalid_request(where, value):
    req = request(delegate="triage") if where == "delegation.budget" else request(model=True)
    budget = {"run.budget": req.run.budget, "actor.budget": req.run.actor_chain[1].budget,
              "delegation.budget": req.delegation.budget}[where]
    budget.wall_clock_seconds = value
    with pytest.raises(InvalidRequest) as info:
        decide(SHIPPED, req)
    assert info.value.code == "invalid_request" and info.value.field.endswith("budget.wall_clock_seconds")


def test_a_policy_file_ceiling_must_be_finite(tmp_path):
    folder = tmp_path / "p"
    shutil.copytree(REPO / "policies", folder)
    instance = folder / "instance.yaml"
    instance.write_text(instance.read_text().replace("wall_clock_seconds: 7200", "wall_clock_seconds: .inf"))
    with pytest.raises(PolicyLoadError, match="instance.yaml.*wall_clock_seconds"):
        load_policy_dir(folder)


# -- the turns ceilings on tool calls, delegations and plans -----------------------------------


@pytest.mark.parametrize(
    "counters, want",
    [
        ({"stretch_turns": TURNS - 1}, ("ALLOW", "allowed")),
        ({"stretch_turns": TURNS}, ("ALLOW", "allowed")),  # a call of the last allowed turn runs
        ({"stretch_turns": TURNS + 1}, ("HALT", "breaker_turns")),
        ({"stretch_turns": 10**9}, ("HALT", "breaker_turns")),
        ({"total_turns": TURNS_TOTAL}, ("ALLOW", "allowed")),
        ({"total_turns": TURNS_TOTAL + 1}, ("HALT", "breaker_turns_total")),
    ],
    ids=["below", "at", "past", "far-past", "total-at", "total-past"],
)
def test_tool_calls_are_halted_past_the_turns_ceilings(counters, want):
    assert verdict(tool_call(**counters)) == want


def test_model_calls_are_halted_at_the_turns_ceiling():
    for turns, want in ((TURNS - 1, ("ALLOW", "allowed")), (TURNS, ("HALT", "breaker_turns"))):
        req = request(model=True)
        req.counters.stretch_turns = turns
        assert verdict(req) == want


def test_delegations_are_halted_past_the_turns_ceiling():
    req = request(delegate="triage")
    req.counters.total_turns = TURNS_TOTAL + 1
    assert verdict(req) == ("HALT", "breaker_turns_total")


# -- built-in defaults: no policy file sets a ceiling, the install is still bounded -------------

BARE = {
    "tool.yaml": "kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n",
    "agent.yaml": "kind: Agent\nname: bot\npersona: a test agent\nallowlist: [ping]\nscope: {access: [read]}\n",
}


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    folder = tmp_path / "bare"
    folder.mkdir()
    for name, text in BARE.items():
        (folder / name).write_text(text)
    return folder


def test_without_any_ceiling_in_the_files_the_defaults_still_halt(bare):
    p = load_policy_dir(bare)
    req = request(p, agent="bot", tenant="", model=True)
    req.counters.stretch_tokens = 10**9
    assert verdict(req, p) == ("HALT", "breaker_tokens")
    for counter, code in (("wall_clock_seconds", "breaker_wall_clock"), ("run_spend_usd", "breaker_spend"),
                          ("owner_spend_today_usd", "breaker_spend"), ("total_turns", "breaker_turns_total")):
        req = request(p, agent="bot", tenant="", model=True)
        setattr(req.counters, counter, 10**9)
        assert verdict(req, p) == ("HALT", code), counter


def test_instance_values_override_the_defaults_both_ways(bare):
    from checkpoint.policy import defaults as policy_defaults

    (bare / "instance.yaml").write_text("kind: Instance\nceilings: {tokens: 5000000, turns: 2}\n")
    p = load_policy_dir(bare)
    assert p.instance.ceilings.tokens == 5_000_000 and p.instance.ceilings.turns == 2
    assert p.instance.ceilings.failures == policy_defaults.DEFAULT_CEILINGS.failures


def test_a_tenant_above_a_default_says_so(bare):
    (bare / "tenant.yaml").write_text("kind: Tenant\nname: default\nceilings: {tokens: 9000000}\n")
    with pytest.raises(PolicyLoadError, match="built-in default"):
        load_policy_dir(bare)


# -- warden policy check warnings ------------------------------------------------------------


def test_policy_check_warns_about_subject_wildcards_and_zero_ceilings(bare):
    (bare / "agent.yaml").write_text(BARE["agent.yaml"].replace("scope: {access: [read]}",
                                     'scope: {access: [read], subjects: ["*"]}\nbudget: {failures: 0}'))
    cli = subprocess.run([sys.executable, "-m", "warden.cli", "policy", "check", str(bare)],
                         capture_output=True, text=True, cwd=REPO)
    assert cli.returncode == 0, cli.stderr  # warnings are not errors
    assert "warning: agent 'bot': scope subjects [\"*\"]" in cli.stderr
    assert "warning: agent 'bot': breaker failures has ceiling 0" in cli.stderr


def test_shipped_policies_warn_about_nothing():
    from checkpoint.policylint import warnings

    assert warnings(SHIPPED) == []


def test_an_agent_without_a_ceiling_is_warned_about(bare, monkeypatch):
    from checkpoint.policy import defaults as policy_defaults
    from checkpoint.policylint import warnings

    monkeypatch.setattr(policy_defaults, "DEFAULT_CEILINGS", policy_defaults.model.Budget(tokens=5))
    monkeypatch.setattr(policy_defaults, "DEFAULT_DAILY_SPEND", policy_defaults.model.DailySpend())
    found = warnings(load_policy_dir(bare))
    assert any("no ceiling on breaker turns" in w for w in found)
    assert not any("breaker tokens" in w for w in found)
    assert any("no daily_spend per_owner_usd" in w for w in found)
