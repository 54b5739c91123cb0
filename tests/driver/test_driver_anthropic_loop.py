"""The loop with the real anthropic SDK against the loopback fake of the Messages API."""

from __future__ import annotations

import json

import driver_fake_anthropic as fa
import pytest
from driver_harness import CHECKPOINT_TOKEN

from driver.clients import CheckpointClient, ToolRunnerClient
from driver.goal import parse_goal
from driver.loop import Driver
from driver.pricing import Prices
from driver.providers import make_provider
from driver.runs.sqlite import SqliteRunStore

GOAL = {"objective": "list templates", "criteria": [
    {"id": "listed", "description": "templates read", "check": {"kind": "receipt_ok", "tool": "list_templates"}},
    {"id": "reported", "description": "names reported"}]}


@pytest.fixture()
def fake():
    with fa.FakeMessagesAPI() as f:
        yield f


@pytest.fixture()
def driver(stack, fake):
    d = Driver(SqliteRunStore(stack.tmp / "anthropic.db"), CheckpointClient(stack.checkpoint_address, token=CHECKPOINT_TOKEN),
               ToolRunnerClient(stack.toolrunner_address),
               lambda name, model, opts: make_provider("anthropic", model=model, api_key="sk-test",
                                                       base_url=fake.base_url),
               prices=Prices.from_policy_dir(stack.policy_dir), provider_backoff_seconds=0)
    yield d
    d.store.close()


def start(driver, **budget):
    run = driver.start_run("recon", parse_goal({**GOAL, "budget": budget}), owner="alice", provider="anthropic",
                           model="claude-haiku-4-5", spawn=False)
    return driver.run_until_stopped(run.run_id)


def test_a_run_with_the_real_sdk_succeeds_and_results_go_back_as_tool_results(driver, fake):
    fake.replies += [
        fa.tool_use("propose_plan", {"steps": [{"id": "l", "tool": "list_templates"}]}, call_id="toolu_p"),
        fa.tool_use("list_templates", {}, call_id="toolu_l"),
        fa.end_turn(json.dumps({"action": "final", "summary": "3 templates", "outcomes": [
            {"criterion": "listed", "met": True, "evidence": "receipt"},
            {"criterion": "reported", "met": True, "evidence": "nginx-restart, disk-usage, patch-os"}]})),
    ]
    run = start(driver)
    assert run.status == "succeeded", (run.code, run.reason)
    assert run.spend_usd > 0  # priced from the instance's model_prices
    last = fake.requests[-1]
    result = last["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "toolu_l"
    # the tenant's reviewed templates, which the checkpoint gave the call (docs/skills.md)
    assert '"name":"web-basic"' in result["content"] and result["content"].startswith("<data")
    tools = {t["name"] for t in fake.requests[0]["tools"]}
    # recon's policy names triage as the one agent it may delegate to: delegate is offered for it alone;
    # every agent may propose a change (it waits for a tenant admin: docs/catalog.md) and a learning
    # (a person reviews it: docs/learnings.md); recon lists a skill and has a template tool:
    # load_skill and propose_template (docs/skills.md)
    assert tools == {"create_task_from_template", "get_task", "list_templates", "propose_plan", "delegate",
                     "propose_agent_change", "load_skill", "propose_template", "propose_learning"}
    delegate = next(t for t in fake.requests[0]["tools"] if t["name"] == "delegate")
    assert delegate["input_schema"]["properties"]["agent"]["enum"] == ["triage"]
    assert "cancel_task" not in json.dumps(fake.requests[0])  # the model never sees tools it may not call


def test_overloaded_and_credit_errors_trip_the_provider_breaker(driver, fake):
    fake.replies += [fa.overloaded(), fa.credit(), fa.end_turn("never sent")]
    run = start(driver, provider_refusals=2)
    assert run.status == "paused" and run.code == "breaker_provider"
    kinds = [e.data["kind"] for e in driver.store.events(run.run_id) if e.kind == "provider_refused"]
    assert kinds == ["overloaded", "credit"]
    assert len(fake.requests) == 2  # the third model call was refused by the checkpoint, never sent


def test_max_tokens_cut_off_never_runs_the_partial_call(driver, fake):
    fake.replies += [fa.tool_use("propose_plan", {"steps": [{"id": "s", "tool": "create_task_from_template"}]}),
                     fa.max_tokens("create_task_from_template")]
    run = start(driver)
    assert run.status == "paused" and run.code == "cut_off"
    assert driver.store.receipts(run.run_id) == []


@pytest.mark.parametrize("arguments", [
    pytest.param({"task_id": "t", "q": json.loads("[" * 150 + "]" * 150)}, id="150-levels-deep"),
    pytest.param({"task_id": "t" * 2_000_000}, id="2MB"),
])
def test_arguments_no_check_can_carry_are_rejected_at_the_boundary_and_the_run_goes_on(driver, fake, arguments):
    """A tool_use input nested deeper than a protobuf Struct can carry, or larger than the checkpoint's
    request limit, used to fail inside the Check itself (DecodeError / RESOURCE_EXHAUSTED): the run
    stopped as a `driver_error`, and every resume decided the same call again and failed again."""
    fake.replies += [
        fa.tool_use("propose_plan", {"steps": [{"id": "g", "tool": "get_task"}]}, call_id="toolu_p"),
        fa.tool_use("get_task", arguments, call_id="toolu_big"),
        fa.end_turn(json.dumps({"action": "handoff", "reason": "cannot go on"})),
    ]
    run = start(driver)
    assert (run.status, run.code) == ("paused", "handoff"), (run.code, run.reason)
    rejected = [e.data for e in driver.store.events(run.run_id) if e.kind == "reply_rejected"]
    assert [r["code"] for r in rejected] == ["malformed_response"]
    # nothing was decided for it, and the model was told, as the tool_use's own result
    assert [e.data["action"] for e in driver.store.events(run.run_id) if e.kind == "decision"] == [
        "model_call", "plan", "model_call", "model_call"]
    result = fake.requests[-1]["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_big" and result["is_error"] and "malformed_response" in result["content"]


def test_a_breaker_tripped_by_a_plan_refuses_the_rest_of_its_turn(driver, fake):
    """HALT on a plan: that call and every further call of the turn are refused, as for a tool
    call's HALT. The calls proposed after the plan used to stay open and ran after the resume,
    before the model read the person's reply."""
    fake.replies += [
        fa.tool_use("propose_plan", {"steps": [{"id": "l", "tool": "list_templates"}]}, call_id="toolu_p1"),
        fa.message([{"type": "tool_use", "id": "toolu_p2", "name": "propose_plan",
                     "input": {"steps": [{"id": "l", "tool": "list_templates"}]}},
                    {"type": "tool_use", "id": "toolu_l", "name": "list_templates", "input": {}}], "tool_use"),
        fa.end_turn(json.dumps({"action": "handoff", "reason": "stopping as told"})),
    ]
    fake.delays[1] = 3.5  # the second turn's reply arrives after the stretch's wall clock ran out
    run = start(driver, wall_clock_seconds=3)
    assert (run.status, run.code) == ("paused", "breaker_wall_clock"), (run.code, run.reason)
    calls = driver.store.calls(run.run_id, run.turn)
    assert [(c["tool"], c["status"], c["verdict"], c["code"]) for c in calls] == [
        ("propose_plan", "done", "HALT", "breaker_wall_clock"),
        ("list_templates", "done", "HALT", "breaker_wall_clock")]
    run = driver.resume(run.run_id, "alice", "stop here", {"wall_clock_seconds": 600}, spawn=False)
    run = driver.run_until_stopped(run.run_id)
    assert (run.status, run.code) == ("paused", "handoff")
    assert driver.store.receipts(run.run_id) == []  # nothing of the halted turn ran
    assert [e.data["action"] for e in driver.store.events(run.run_id) if e.kind == "decision"] == [
        "model_call", "plan", "model_call", "plan", "model_call"]
    results = fake.requests[-1]["messages"][-1]["content"]
    assert [(r["tool_use_id"], r["is_error"]) for r in results if r["type"] == "tool_result"] == [
        ("toolu_p2", True), ("toolu_l", True)]


# -- real response shapes: each handled or refused, and every follow-up request one the real API
# -- takes (the fake refuses what the real API refuses: driver_fake_anthropic.request_problems)

PLAN = fa.tool_use("propose_plan", {"steps": [{"id": "l", "tool": "list_templates"},
                                              {"id": "g", "tool": "get_task"}]}, call_id="toolu_p")
HANDOFF = fa.end_turn(json.dumps({"action": "handoff", "reason": "stopping here"}))


def events(driver, run, kind):
    return [e.data for e in driver.store.events(run.run_id) if e.kind == kind]


def last_results(fake):
    """The tool_result blocks of the last request's last message, as (id, is_error), and its other blocks."""
    content = fake.requests[-1]["messages"][-1]["content"]
    return ([(b["tool_use_id"], b["is_error"]) for b in content if b["type"] == "tool_result"],
            [b["type"] for b in content if b["type"] != "tool_result"])


def test_duplicate_tool_use_ids_are_refused_and_the_follow_up_is_valid(driver, fake):
    """Two tool_use blocks with one id: nothing of the reply runs, and the next request still pairs
    every tool_use id with exactly one tool_result (replaying the reply as it came would not)."""
    fake.replies += [PLAN, fa.message([
        {"type": "tool_use", "id": "toolu_d", "name": "list_templates", "input": {}},
        {"type": "tool_use", "id": "toolu_d", "name": "get_task", "input": {"task_id": "t"}}], "tool_use"), HANDOFF]
    run = start(driver)
    assert fake.refused == []
    assert (run.status, run.code) == ("paused", "handoff"), (run.code, run.reason)
    assert [r["code"] for r in events(driver, run, "reply_rejected")] == ["malformed_response"]
    assert driver.store.receipts(run.run_id) == []
    assert last_results(fake)[0] == [("toolu_d", True)]


def test_a_tool_call_written_as_text_is_refused_and_never_runs(driver, fake):
    """A tool call comes only as a tool_use block: one the model writes as JSON text has no id the
    API could pair with a result, and was run as if it had been offered."""
    fake.replies += [PLAN, fa.end_turn(json.dumps({"action": "tool_call", "tool": "list_templates",
                                                   "arguments": {}})), HANDOFF]
    run = start(driver)
    assert fake.refused == []
    assert (run.status, run.code) == ("paused", "handoff"), (run.code, run.reason)
    assert [r["code"] for r in events(driver, run, "reply_rejected")] == ["malformed_response"]
    assert driver.store.receipts(run.run_id) == []


def test_text_beside_tool_calls_and_several_calls_in_one_turn(driver, fake):
    """Prose beside two tool calls: both run, in order; the follow-up answers each id once, results
    first, and replays the prose. A final written beside a call is refused (tool_on_final)."""
    fake.replies += [
        PLAN,
        fa.message([{"type": "text", "text": "Listing the templates, then reading a task."},
                    {"type": "tool_use", "id": "toolu_a", "name": "list_templates", "input": {}},
                    {"type": "text", "text": "And the task:"},
                    {"type": "tool_use", "id": "toolu_b", "name": "get_task", "input": {"task_id": "task-none"}}],
                   "tool_use"),
        fa.message([{"type": "tool_use", "id": "toolu_c", "name": "list_templates", "input": {}},
                    {"type": "text", "text": json.dumps({"action": "final", "outcomes": []})}], "tool_use"),
        HANDOFF,
    ]
    run = start(driver)
    assert fake.refused == []
    assert (run.status, run.code) == ("paused", "handoff"), (run.code, run.reason)
    assert [c["tool"] for c in driver.store.calls(run.run_id) if c["verdict"] == "ALLOW"] == [
        "propose_plan", "list_templates", "get_task"]
    second = fake.requests[2]["messages"]
    assert [b["type"] for b in second[-2]["content"]] == ["text", "tool_use", "text", "tool_use"]
    assert [b["tool_use_id"] for b in second[-1]["content"]] == ["toolu_a", "toolu_b"]
    assert [r["code"] for r in events(driver, run, "reply_rejected")] == ["tool_on_final"]
    assert last_results(fake)[0] == [("toolu_c", True)]


def test_a_reply_cut_off_inside_a_tool_call_is_answered_after_the_resume(driver, fake):
    """max_tokens inside a tool_use: nothing runs, the run pauses; after the person's resume the
    cut call gets its refused result first and the person's reply after it."""
    fake.replies += [PLAN, fa.message([{"type": "text", "text": "Reading the task"},
                                       {"type": "tool_use", "id": "toolu_cut", "name": "get_task", "input": {}}],
                                      "max_tokens"), HANDOFF]
    run = start(driver)
    assert (run.status, run.code) == ("paused", "cut_off")
    run = driver.resume(run.run_id, "alice", "hand it over", {}, spawn=False)
    run = driver.run_until_stopped(run.run_id)
    assert fake.refused == []
    assert (run.status, run.code) == ("paused", "handoff")
    assert driver.store.receipts(run.run_id) == []
    assert last_results(fake) == ([("toolu_cut", True)], ["text"])


@pytest.mark.parametrize("stop", ["pause_turn", "stop_sequence", "a_reason_from_next_year", None])
def test_an_unknown_stop_reason_is_never_taken_for_a_finished_turn(driver, fake, stop):
    """Only end_turn and tool_use finish a turn; a stop reason the driver does not know (or none)
    runs nothing of the reply and pauses the run for a person (`unknown_stop_reason`)."""
    fake.replies += [PLAN, fa.message([{"type": "tool_use", "id": "toolu_l", "name": "list_templates",
                                        "input": {}}], stop), HANDOFF]
    run = start(driver)
    assert (run.status, run.code) == ("paused", "unknown_stop_reason"), (run.code, run.reason)
    assert driver.store.receipts(run.run_id) == []
    run = driver.resume(run.run_id, "alice", "hand it over", {}, spawn=False)
    run = driver.run_until_stopped(run.run_id)
    assert fake.refused == [] and (run.status, run.code) == ("paused", "handoff")
    assert last_results(fake)[0] == [("toolu_l", True)]
