"""Each of the eleven breakers tripping through the real loop, and what a resume may do after."""

from __future__ import annotations

import pytest
from driver_harness import PLAN, call, decisions, final, goal

from driver.errors import RunStateError

SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
LIST = call("list_templates")
BREAKER_CASES = {
    # breaker: (goal budget, script, model)
    "tokens": ({"tokens": 1}, [PLAN, LIST], "scripted"),
    "turns": ({"turns": 1}, [PLAN, LIST], "scripted"),
    "turns_total": ({"turns_total": 1}, [PLAN, LIST], "scripted"),
    "tool_calls": ({"tool_calls": 1}, [PLAN, {"actions": [LIST, LIST]}], "scripted"),
    "wall_clock": ({"wall_clock_seconds": 0.000001}, [PLAN], "scripted"),
    "repetition": ({"repetition": 1}, [PLAN, LIST, LIST], "scripted"),
    "failures": ({"failures": 2}, [PLAN, call("get_task", task_id="bad id"), call("get_task", task_id="nope"),
                                   LIST], "scripted"),
    "drift": ({"drift": 1}, [{"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
        {"id": "s", "tool": "list_templates"}]}}, call("get_task", task_id="task-a1"), LIST], "scripted"),
    "tree_budget": ({"tree_tokens": 1}, [PLAN, LIST], "scripted"),
    "spend": ({"spend_usd": 0.0000001}, [PLAN, LIST], "claude-haiku-4-5"),
    "provider": ({"provider_refusals": 2}, [{"error": "overloaded"}, {"error": "credit"}, PLAN], "scripted"),
}


@pytest.mark.parametrize("breaker", sorted(BREAKER_CASES))
def test_breaker_trips_pauses_and_names_itself(stack, breaker):
    budget, script, model = BREAKER_CASES[breaker]
    d = stack.driver()
    started = d.start_run("recon", goal(**budget), owner="alice", provider="scripted", model=model,
                          provider_options={"script": script}, spawn=False)
    run = d.run_until_stopped(started.run_id)
    assert run.status == "paused", (run.code, run.reason)
    assert run.code == f"breaker_{breaker}"
    paused = [e for e in d.store.events(run.run_id) if e.kind == "run_paused"][-1]
    assert paused.data["breaker"] == breaker
    assert ("HALT", f"breaker_{breaker}") in [(v, c) for _, v, c in decisions(d, run.run_id)]


def test_halt_refuses_every_further_call_in_the_turn_with_a_stop_message(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(tool_calls=1), owner="alice", provider="scripted",
                      provider_options={"script": [PLAN, {"actions": [LIST, LIST, call("get_task", task_id="task-z")]}]},
                      spawn=False)
    run = d.run_until_stopped(run.run_id)
    calls = d.store.calls(run.run_id, run.turn)
    assert [c["verdict"] for c in calls] == ["ALLOW", "HALT", "HALT"]
    assert all("Stop now" in c["result"]["content"] for c in calls[1:])
    assert len(d.store.receipts(run.run_id)) == 1


def test_resume_with_raised_ceiling_continues_under_the_same_pinned_version(stack):
    d = stack.driver()
    # turn 3's model call meets the turns ceiling of 2: HALT before the model is asked again
    script = [PLAN, SCAN, call("get_task", task_id="task-abc"), final(reported="status succeeded")]
    run = d.start_run("recon", goal(turns=2), owner="alice", provider="scripted",
                      provider_options={"script": script}, spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.code == "breaker_turns"
    version = run.agent_version
    # the policy files change mid-run: the pinned version does not
    (stack.policy_dir / "agents" / "recon.yaml").write_text(
        (stack.policy_dir / "agents" / "recon.yaml").read_text().replace("You are a reconnaissance", "You are a"))
    d.resume(run.run_id, "alice", "carry on", {"turns": 10}, spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    assert run.agent_version == version and run.stretch == 2
    assert run.total_turns == 4 and run.stretch_turns == 2
    assert [c["verdict"] for c in d.store.calls(run.run_id) if c["tool"] == SCAN["tool"]] == ["ALLOW"]
    assert ("HALT", "breaker_turns") in [(v, c) for _, v, c in decisions(d, run.run_id)]
    tool_decisions = [e.data for e in d.store.events(run.run_id) if e.kind == "decision"]
    assert all(e.get("decision_id") for e in tool_decisions)


def test_turns_total_is_never_passed_by_a_resume(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(turns_total=1), owner="alice", provider="scripted",
                      provider_options={"script": [PLAN, LIST]}, spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.code == "breaker_turns_total"
    with pytest.raises(RunStateError) as err:
        d.resume(run.run_id, "alice", "more", {"turns": 50}, spawn=False)
    assert err.value.code == "turns_total_exhausted"
    with pytest.raises(RunStateError) as err:
        d.resume(run.run_id, "alice", "more", {"turns_total": 50}, spawn=False)
    assert err.value.code == "turns_total_fixed"
    assert d.store.run(run.run_id).status == "paused"


def test_provider_refusals_are_counted_per_stretch(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(provider_refusals=1), owner="alice", provider="scripted",
                      provider_options={"script": [{"error": "credit"}, PLAN, LIST, final(reported="x")]},
                      spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.code == "breaker_provider" and run.provider_refusals == 1
    refused = [e.data["kind"] for e in d.store.events(run.run_id) if e.kind == "provider_refused"]
    assert refused == ["credit"]
    run = d.resume(run.run_id, "alice", "credit topped up", spawn=False)
    assert run.provider_refusals == 0
    run = d.run_until_stopped(run.run_id)
    assert run.model_attempts >= 2


def test_every_human_act_is_on_the_checkpoints_record_before_it_takes_effect(stack, checkpoint_server):
    d = stack.driver()
    script = [PLAN, SCAN, call("get_task", task_id="task-abc"), final(reported="status succeeded")]
    run = d.run_until_stopped(d.start_run("recon", goal(turns=2), owner="alice", provider="scripted",
                                          provider_options={"script": script}, spawn=False).run_id)
    assert run.code == "breaker_turns"
    d.resume(run.run_id, "alice", "carry on", {"turns": 10}, spawn=False)
    d.amend_goal(run.run_id, goal(turns=12), "alice")
    d.cancel(run.run_id, "carol", "enough")
    acts = [r for r in checkpoint_server.log.read(run_id=run.run_id) if r["action"] in ("resume", "amend", "cancel")]
    assert [(r["action"], r["code"], r["arguments"]["person"]) for r in acts] == [
        ("resume", "recorded", "alice"), ("amend", "recorded", "alice"), ("cancel", "recorded", "carol")]
    assert acts[0]["arguments"]["details"] == {"raised": {"turns": 10}} and acts[0]["principal"] == "driver"
    assert acts[2]["arguments"]["note"] == "enough"


def test_a_resume_the_checkpoint_cannot_record_does_not_happen(stack):
    d = stack.driver()
    run = d.run_until_stopped(d.start_run("recon", goal(turns=1), owner="alice", provider="scripted",
                                          provider_options={"script": [PLAN, SCAN]}, spawn=False).run_id)
    assert run.status == "paused"
    d.store.update_run(run.run_id, run_token="wrun1.forged.token")  # the checkpoint refuses to record
    with pytest.raises(RunStateError) as err:
        d.resume(run.run_id, "alice", "go on", {"turns": 5}, spawn=False)
    assert err.value.code == "act_not_recorded" and "run_token_invalid" in err.value.message
    assert d.store.run(run.run_id).status == "paused"


@pytest.mark.parametrize("kind", ["credit", "quota", "auth"])
def test_a_refusal_retrying_cannot_fix_trips_the_provider_breaker_at_once(stack, kind):
    d = stack.driver()
    run = d.start_run("recon", goal(provider_refusals=5), owner="alice", provider="scripted",
                      provider_options={"script": [{"error": kind}, PLAN, final(reported="x")]}, spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert (run.status, run.code, run.provider_refusals) == ("paused", "breaker_provider", 1)
    assert run.model_attempts == 1  # not asked again


def test_a_transient_refusal_is_retried_up_to_the_ceiling(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(provider_refusals=5), owner="alice", provider="scripted",
                      provider_options={"script": [{"error": "overloaded"}, PLAN, LIST, final(reported="x")]},
                      spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.code != "breaker_provider" and run.provider_refusals == 1
    assert run.model_attempts >= 2  # asked again after the overload


@pytest.mark.parametrize("breaker", ["drift", "repetition"])
def test_drift_and_repetition_count_per_stretch_so_a_resume_goes_on(stack, breaker):
    """A trip at a ceiling no person may raise (the tenant's) must not re-halt on every resume."""
    budget, script, _ = BREAKER_CASES[breaker]
    d = stack.driver()
    run = d.run_until_stopped(d.start_run("recon", goal(**budget), owner="alice", provider="scripted",
                                          provider_options={"script": [*script, LIST, final(reported="x")]},
                                          spawn=False).run_id)
    assert run.code == f"breaker_{breaker}"
    run = d.resume(run.run_id, "alice", "go on", spawn=False)  # nothing raised
    assert run.drift == 0
    run = d.run_until_stopped(run.run_id)
    assert run.code != f"breaker_{breaker}", (run.code, run.reason)
    tripped = [c for _, v, c in decisions(d, run.run_id) if c == f"breaker_{breaker}"]
    assert len(tripped) == 1
