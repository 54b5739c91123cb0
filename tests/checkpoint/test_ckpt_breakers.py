"""The eleven breakers at, below and above their ceilings, and ceilings that only narrow."""

from __future__ import annotations

import shutil

import pytest
from ckpt_helpers import case, params

from checkpoint.engine.breakers import BREAKERS
from warden import codes

DOC = {"doc": "doc:readme"}
MODEL = {"provider": "anthropic", "model": "claude-haiku-4-5"}

# breaker -> (counter, instance ceiling in fixtures/engine/instance.yaml)
CEILINGS = {
    "tokens": ("stretch_tokens", 1000),
    "turns": ("stretch_turns", 10),
    "turns_total": ("total_turns", 20),
    "tool_calls": ("turn_tool_calls", 5),
    "wall_clock": ("wall_clock_seconds", 60),
    "repetition": ("identical_calls", 3),
    "failures": ("consecutive_failures", 4),
    "drift": ("drift", 2),
    "tree_budget": ("tree_tokens", 5000),
    "spend": ("run_spend_usd", 2.5),
    "provider": ("provider_refusals", 2),
}
TOOL_ONLY = {"tool_calls", "repetition"}
# a turn is counted when its model call is allowed; the tool calls of that turn belong to it, so
# before a tool call these trip only once the counter is past the ceiling
PAST_ON_TOOL_CALLS = {"turns", "turns_total"}
FLOATS = {"wall_clock", "spend"}


def _breaker_rows() -> list:
    rows = []
    for name, (counter, ceiling) in CEILINGS.items():
        step = 0.5 if name in FLOATS else 1
        for where, used in (("below", ceiling - step), ("at", ceiling), ("above", ceiling + step)):
            tripped = where != "below"
            want = ("HALT", f"breaker_{name}", f"breaker.{name}") if tripped else ("ALLOW", "allowed", "allow")
            if name in PAST_ON_TOOL_CALLS:
                past = ("HALT", f"breaker_{name}", f"breaker.{name}") if where == "above" else ("ALLOW", "allowed", "allow")
                rows.append(case(f"{name}/tool-call/{where}/last-turn-runs", *past, chain=["reader"],
                                 tool="read_doc", args=DOC, counters={counter: used}))
            else:
                rows.append(case(f"{name}/tool-call/{where}", *want, chain=["reader"], tool="read_doc", args=DOC,
                                 counters={counter: used}))
            if name in TOOL_ONLY:
                # counted per tool call: a model call is never stopped by it
                rows.append(case(f"{name}/model-call/{where}/not-applicable", "ALLOW", "allowed",
                                 chain=["reader"], model=MODEL, counters={counter: used}))
            else:
                rows.append(case(f"{name}/model-call/{where}", *want, chain=["reader"], model=MODEL,
                                 counters={counter: used}))
    # daily spend: the accountable person's and the tenant's, instance and (narrower) tenant level
    for who, counter, instance_limit, tenant_limit in (
        ("owner", "owner_spend_today_usd", 10, 5),
        ("tenant", "tenant_spend_today_usd", 100, 50),
    ):
        for where, delta in (("below", -0.01), ("at", 0), ("above", 0.01)):
            tripped = where != "below"
            want = ("HALT", "breaker_spend", "breaker.spend") if tripped else ("ALLOW", "allowed", "allow")
            rows.append(case(f"spend/{who}-daily/instance/{where}", *want, chain=["reader"], model=MODEL,
                             counters={counter: instance_limit + delta}))
            rows.append(case(f"spend/{who}-daily/tenant-small/{where}", *want, chain=["s0"], model=MODEL,
                             counters={counter: tenant_limit + delta}))
    return rows


BREAKER_CASES = _breaker_rows()


@pytest.mark.parametrize("c", params(BREAKER_CASES))
def test_breaker_table(c):
    got = c.check()
    if got.verdict == "HALT":
        assert "the run pauses for a person" in got.reason or "daily allowance" in got.reason


def test_the_table_covers_all_eleven_breakers():
    assert tuple(CEILINGS) == codes.BREAKERS == tuple(b.name for b in BREAKERS)


def test_breakers_apply_to_delegations_and_plans_too():
    for c in (
        case("d", "HALT", "breaker_failures", chain=["worker"], delegation={"agent": "helper"},
             counters={"consecutive_failures": 4}),
        case("d-a-turn-left", "ALLOW", "allowed", chain=["worker"], delegation={"agent": "helper"},
             counters={"stretch_turns": 9, "total_turns": 19}),
        # a child needs a turn: in the parent's last turn there is none left to give it
        case("d-last-turn-halts", "HALT", "breaker_turns", chain=["worker"], delegation={"agent": "helper"},
             counters={"stretch_turns": 10, "total_turns": 10}),
        case("d-last-lifetime-turn-halts", "HALT", "breaker_turns_total", chain=["worker"],
             delegation={"agent": "helper"}, counters={"stretch_turns": 1, "total_turns": 20}),
        case("p-past-the-turns", "HALT", "breaker_turns", chain=["reader"], plan=[{"id": "s", "tool": "read_doc"}],
             counters={"stretch_turns": 11}),
        case("p", "HALT", "breaker_tokens", chain=["reader"], plan=[{"id": "s", "tool": "read_doc"}],
             counters={"stretch_tokens": 1000}),
        case("p-tool-only", "ALLOW", "allowed", chain=["reader"], plan=[{"id": "s", "tool": "read_doc"}],
             counters={"turn_tool_calls": 99, "identical_calls": 99}),
    ):
        c.check()


# -- turns across the delegation tree: the runs below count into this run's turn breakers -----------
TREE_TURNS = [
    # (id, counters, verdict, code)
    ("own-and-below-reach-the-ceiling", {"stretch_turns": 4, "descendant_stretch_turns": 6}, "HALT", "breaker_turns"),
    ("own-and-below-below-the-ceiling", {"stretch_turns": 4, "descendant_stretch_turns": 5}, "ALLOW", "allowed"),
    ("lifetime-own-and-below", {"total_turns": 15, "descendant_total_turns": 5}, "HALT", "breaker_turns_total"),
    ("lifetime-below-alone", {"descendant_total_turns": 20}, "HALT", "breaker_turns_total"),
    ("lifetime-below-the-ceiling", {"total_turns": 15, "descendant_total_turns": 4}, "ALLOW", "allowed"),
]


@pytest.mark.parametrize("label, counters, verdict, code", TREE_TURNS, ids=[t[0] for t in TREE_TURNS])
def test_the_turn_breakers_count_the_turns_of_the_runs_below(label, counters, verdict, code):
    got = case(label, verdict, code, chain=["reader"], model=MODEL, counters=counters).check()
    if verdict == "HALT":
        assert "by runs below this one" in got.reason


def test_a_tool_call_of_the_last_turn_runs_even_when_the_turns_were_the_childrens():
    case("past", "ALLOW", "allowed", chain=["reader"], tool="read_doc", args=DOC,
         counters={"stretch_turns": 4, "descendant_stretch_turns": 6}).check()
    case("beyond", "HALT", "breaker_turns", chain=["reader"], tool="read_doc", args=DOC,
         counters={"stretch_turns": 5, "descendant_stretch_turns": 6}).check()


@pytest.mark.parametrize(
    "counters, requested, turns, turns_total",
    [
        pytest.param({"stretch_turns": 1}, None, 9, 19, id="parent-used-one"),
        pytest.param({"stretch_turns": 3, "descendant_stretch_turns": 4, "total_turns": 5,
                      "descendant_total_turns": 12}, None, 3, 3, id="earlier-children-used-some"),
        pytest.param({"stretch_turns": 2}, 3, 3, 18, id="a-smaller-request-still-narrows"),
        pytest.param({"stretch_turns": 2}, 50, 8, 18, id="a-bigger-request-never-widens"),
    ],
)
def test_a_child_is_granted_at_most_the_turns_its_parent_has_left(counters, requested, turns, turns_total):
    delegation = {"agent": "helper", **({"budget": {"turns": requested}} if requested else {})}
    got = case("d", "ALLOW", "allowed", chain=["worker"], delegation=delegation,
               counters={"total_turns": counters.get("stretch_turns", 0), **counters}).check()
    assert (got.response.child_budget.turns, got.response.child_budget.turns_total) == (turns, turns_total)


def test_a_person_acting_directly_has_no_breakers():
    # breakers end an agent's loop; a person calling a tool is not in one
    case("p", "ALLOW", "allowed", chain=[], tool="read_doc", args=DOC, counters={"stretch_turns": 999}).check()


def test_first_tripped_breaker_in_table_order_wins():
    got = case("x", "HALT", "breaker_tokens", chain=["reader"], model=MODEL,
               counters={"stretch_tokens": 5000, "provider_refusals": 9}).check()
    assert got.rule == "breaker.tokens"


# -- narrowing: instance 10 >= tenant t 8 >= agent/run/ancestor budgets (fixtures/narrowing) --------
# (agent chain, run budget, ancestor actor budgets, effective ceiling)
NARROWING = [
    ("instance-only", ["free"], None, None, 10),
    ("tenant-narrows-instance", ["loose"], None, None, 8),
    ("agent-50-never-widens-tenant-8", ["loose"], None, None, 8),
    ("run-budget-narrows", ["loose"], 4, None, 4),
    ("run-budget-100-never-widens", ["loose"], 100, None, 8),
    ("run-budget-100-never-widens-instance", ["free"], 100, None, 10),
    ("agent-budget-narrows-tenant", ["parent"], None, None, 6),
    ("ancestor-agent-budget-narrows-child", ["parent", "child"], None, None, 6),
    ("ancestor-run-budget-narrows-child", ["parent", "child"], None, {"parent": 3}, 3),
    ("ancestor-run-budget-100-never-widens", ["parent", "child"], None, {"parent": 100}, 6),
    ("child-run-budget-narrows", ["parent", "child"], 5, {"parent": 100}, 5),
    ("own-actor-budget-narrows", ["parent", "child"], None, {"child": 2}, 2),
]
FIELDS = [("turns", "stretch_turns", "model", 1), ("tool_calls", "turn_tool_calls", "tool", 1),
          ("spend_usd", "run_spend_usd", "model", 0.25)]
BREAKER_OF = {"turns": "turns", "tool_calls": "tool_calls", "spend_usd": "spend"}


def _narrowing_rows() -> list:
    rows = []
    for label, chain, run_budget, ancestors, effective in NARROWING:
        for field, counter, action, step in FIELDS:
            action_kw = {"model": MODEL} if action == "model" else {"tool": "ping", "args": {}}
            common = dict(
                folder="narrowing", chain=chain, **action_kw,
                budget={field: run_budget} if run_budget else None,
                actor_budgets={k: {field: v} for k, v in (ancestors or {}).items()} or None,
            )
            name = BREAKER_OF[field]
            rows.append(case(f"{label}/{field}/below", "ALLOW", "allowed",
                             counters={counter: effective - step}, **common))
            rows.append(case(f"{label}/{field}/at", "HALT", f"breaker_{name}",
                             counters={counter: effective}, **common))
    return rows


NARROWING_CASES = _narrowing_rows()


@pytest.mark.parametrize("c", params(NARROWING_CASES))
def test_ceilings_only_narrow(c):
    c.check()


@pytest.mark.parametrize(
    "requested, expected",
    [pytest.param(100, 6, id="bigger-request-never-widens"), pytest.param(2, 2, id="smaller-request-narrows")],
)
def test_child_budget_in_delegation_response_is_narrowest(requested, expected):
    got = case("d", "ALLOW", "allowed", folder="narrowing", chain=["parent"],
               delegation={"agent": "child", "budget": {"turns": requested}}).check()
    assert got.response.child_budget.turns == expected
    assert got.response.child_budget.tool_calls == 6  # parent's agent budget, below tenant's 8
    assert got.response.child_budget.spend_usd == 6.0


def _zero_ceiling_folder(tmp_path, level: str):
    from ckpt_helpers import FOLDERS

    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["narrowing"], folder)
    if level == "agent":
        agents = folder / "agents.yaml"
        agents.write_text(agents.read_text().replace("budget: {turns: 6, tool_calls: 6, spend_usd: 6.0}",
                                                     "budget: {turns: 6, tool_calls: 0, spend_usd: 6.0}"))
    else:
        (folder / "tenant.yaml").write_text("kind: Tenant\nname: t\nceilings: {turns: 8, tool_calls: 0}\n")
    return folder


@pytest.mark.parametrize("level", ["tenant", "agent"])
def test_a_zero_ceiling_in_a_policy_file_is_not_unlimited(tmp_path, level):
    from ckpt_helpers import build, outcome

    from checkpoint.policy import PolicyLoadError, load_policy_dir

    try:
        p = load_policy_dir(_zero_ceiling_folder(tmp_path, level))
    except PolicyLoadError:
        return  # refusing 0 at load is fine too: either way it must not mean "unlimited"
    got = outcome(p, build(p, chain=["parent"], tool="ping", args={}, counters={"turn_tool_calls": 3}))
    assert (got.verdict, got.code) == ("HALT", "breaker_tool_calls"), got


def test_a_zero_daily_spend_allows_nothing(tmp_path):
    from ckpt_helpers import FOLDERS, build, outcome

    from checkpoint.policy import load_policy_dir

    folder = tmp_path / "p"
    shutil.copytree(FOLDERS["narrowing"], folder)
    (folder / "tenant.yaml").write_text("kind: Tenant\nname: t\ndaily_spend: {per_owner_usd: 0}\n")
    p = load_policy_dir(folder)
    got = outcome(p, build(p, chain=["parent"], model=MODEL))
    assert (got.verdict, got.code) == ("HALT", "breaker_spend")
