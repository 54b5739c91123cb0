"""Delegation through the real loop: a recon run starts a triage child run, decided by the checkpoint."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest
from driver_harness import PERSON_TOKEN, call, decisions, kinds

from driver.goal import parse_goal
from driver.providers.scripted import ScriptError, parse_script
from driver.runs.model import AWAITING_CHILD, PAUSED, SUCCEEDED, TERMINAL
from warden.checkpoint.v1 import checkpoint_pb2 as cpb
from warden.checkpoint.v1.checkpoint_pb2_grpc import CheckpointServiceStub

TRIAGE_PLAN = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
    {"id": "read", "tool": "get_task"}]}}


def delegate(agent: str = "triage", **extra: Any) -> dict[str, Any]:
    arguments = {"agent": agent, "objective": "Summarise task task-abc123 by severity.",
                 "criteria": ["the findings are summarised"], **extra}
    return call("delegate", **arguments)


def final(**evidence: str) -> dict[str, Any]:
    return {"action": "final", "summary": "done",
            "outcomes": [{"criterion": k, "met": True, "evidence": v} for k, v in evidence.items()]}


def parent_goal() -> Any:
    return parse_goal({"objective": "Get the findings of task-abc123 summarised.",
                       "criteria": [{"id": "summarised", "description": "a summary came back"}]})


TRIAGE_OK = [TRIAGE_PLAN, call("get_task", task_id="task-abc123"), final(c1="get_task receipt")]


def start(stack: Any, d: Any, responses: list[Any], children: dict[str, Any] | None = None) -> str:
    script = {"responses": responses, "delegates": {k: {"responses": v} for k, v in (children or {}).items()}}
    run = d.start_run("recon", parent_goal(), owner="alice", provider="scripted",
                      provider_options={"script": parse_script_dict(script)}, spawn=False)
    d.run_until_stopped(run.run_id)
    return str(run.run_id)


def parse_script_dict(script: dict[str, Any]) -> dict[str, Any]:
    import yaml

    return parse_script(yaml.safe_dump(script))


def settle(d: Any, run_id: str, timeout: float = 60) -> dict[str, Any]:
    """Wait until the run has ended or waits for a person (children run on their own threads)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = d.store.run(run_id)
        if run.status in TERMINAL or d.store.waits_for_person(run_id):
            d.wait(run_id, timeout=5)
            return d.store.run(run_id)
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} still {d.store.run(run_id)['status']}")


def test_a_delegated_child_runs_with_the_intersected_authority_and_its_outcome_returns(stack, checkpoint_server):
    d = stack.driver()
    parent_id = start(stack, d, [delegate(), final(summarised="the triage child run succeeded")],
                      {"triage": TRIAGE_OK})
    parent = settle(d, parent_id)
    assert parent.status == SUCCEEDED, (parent.code, parent.reason)
    [child] = d.store.children(parent_id)
    assert child.status == SUCCEEDED and child.agent == "triage" and child.depth == 1
    assert child.root_run_id == parent_id and child.parent_run_id == parent_id
    # triage's allowlist within recon's: both of its tools are in recon's allowlist too
    assert sorted(t["name"] for t in child.tool_specs) == ["get_task", "list_templates"]
    assert ("delegation", "ALLOW", "allowed") in decisions(d, parent_id)
    # the child's calls carried the chain token: none refused as chain_unverified
    assert [x for x in decisions(d, child.run_id) if x[1] != "ALLOW"] == []
    assert [r["tool"] for r in d.store.receipts(child.run_id)] == ["get_task"]
    assert {"child_started", "child_ended"} <= set(kinds(d, parent_id))
    goal = d.store.goal(child.run_id)
    assert [c["description"] for c in goal["criteria"]] == ["the findings are summarised"]
    # the parent model got the child's outcome as data
    results = [r for e in d.store.transcript(parent_id) if e["role"] == "results" for r in e["results"]]
    assert any('source="child_run"' in r["content"] and 'status="succeeded"' in r["content"]
               and not r["is_error"] for r in results)
    # the decision log names the whole chain for the child's tool call
    records = list(checkpoint_server.log.read(run_id=child.run_id))
    tool_record = next(r for r in records if r["action"] == "tool_call")
    assert [a["id"] for a in tool_record["actor_chain"]] == ["alice", "recon", "triage"]
    assert tool_record["root_run_id"] == parent_id and tool_record["parent_run_id"] == parent_id
    # a security team streams the whole tree by its root, in log order
    with grpc.insecure_channel(checkpoint_server.address) as channel:
        tree = list(CheckpointServiceStub(channel).WatchDecisions(  # with an auditor's credential
            cpb.WatchDecisionsRequest(root_run_id=parent_id, no_follow=True), timeout=10,
            metadata=[("authorization", f"Bearer {PERSON_TOKEN}")]))
    assert {r.record.run_id for r in tree} == {parent_id, child.run_id}
    assert [r.record.seq for r in tree] == sorted(r.record.seq for r in tree)
    assert len(tree) == len(list(checkpoint_server.log.read(run_id=parent_id))) + len(records)


def test_narrowing_shrinks_what_the_child_is_offered(stack):
    d = stack.driver()
    parent_id = start(stack, d, [delegate(narrowing={"tools": ["get_task"]}, budget={"turns": 5}),
                                 {"action": "handoff", "reason": "x"}],
                      {"triage": TRIAGE_OK})
    settle(d, parent_id)
    [child] = d.store.children(parent_id)
    assert [t["name"] for t in child.tool_specs] == ["get_task"]
    assert child.budget["turns"] == 5
    assert child.status == SUCCEEDED


def test_a_delegation_the_policy_does_not_allow_starts_nothing(stack):
    d = stack.driver()
    parent_id = start(stack, d, [delegate("refunds"), {"action": "handoff", "reason": "refused"}])
    run = settle(d, parent_id)
    assert run.status == PAUSED and run.code == "handoff"
    assert ("delegation", "DENY", "delegation_not_allowed") in decisions(d, parent_id)
    assert d.store.children(parent_id) == []
    assert d.store.run(parent_id).consecutive_failures == 1


def test_malformed_delegation_is_refused_before_the_checkpoint(stack):
    d = stack.driver()
    parent_id = start(stack, d, [call("delegate", agent="triage", objective="x"), {"action": "handoff", "reason": "x"}])
    settle(d, parent_id)
    [refused] = [c for c in d.store.calls(parent_id) if c["tool"] == "delegate"]
    assert refused["code"] == "malformed_response"
    assert [x for x in decisions(d, parent_id) if x[0] == "delegation"] == []
    assert d.store.children(parent_id) == []


def test_a_paused_child_holds_the_parent_and_a_cancelled_child_returns_an_error(stack):
    d = stack.driver()
    parent_id = start(stack, d, [delegate(), {"action": "handoff", "reason": "the child did not finish"}],
                      {"triage": [{"action": "handoff", "reason": "need a person"}]})
    run = settle(d, parent_id)
    [child] = d.store.children(parent_id)
    assert run.status == AWAITING_CHILD and d.store.run(child.run_id).status == PAUSED
    assert d.store.waits_for_person(parent_id)
    d.cancel(child.run_id, "alice", "not needed")
    run = settle(d, parent_id)
    assert run.status == PAUSED and run.code == "handoff"
    results = [r for e in d.store.transcript(parent_id) if e["role"] == "results" for r in e["results"]]
    assert any(r["is_error"] and 'status="cancelled"' in r["content"] for r in results)


def test_cancelling_the_parent_cancels_its_children(stack):
    d = stack.driver()
    parent_id = start(stack, d, [delegate()], {"triage": [{"action": "handoff", "reason": "wait"}]})
    settle(d, parent_id)
    [child] = d.store.children(parent_id)
    d.cancel(parent_id, "alice")
    assert d.store.run(child.run_id).status == "cancelled"
    assert d.store.run(parent_id).status == "cancelled"


def _parent_waiting_on_a_paused_child(stack: Any) -> tuple[Any, str, dict[str, Any]]:
    """A parent that will succeed once its child does, and a child paused on a handoff; the
    driver stopped, as if it had crashed."""
    d = stack.driver()
    parent_id = start(stack, d, [delegate(), final(summarised="child succeeded")],
                      {"triage": [{"action": "handoff", "reason": "wait"}]})
    settle(d, parent_id)
    [child] = d.store.children(parent_id)
    d.stop()
    return d, parent_id, child


def test_a_child_that_ended_while_the_driver_was_down_is_handed_to_its_parent(stack):
    d, parent_id, child = _parent_waiting_on_a_paused_child(stack)
    # The crash window: the child's final status is stored, its parent not told yet.
    d.store.set_status(child.run_id, SUCCEEDED, "succeeded", "finished before the crash")
    again = stack.driver()
    again.recover()
    run = settle(again, parent_id)
    assert run.status == SUCCEEDED, (run.code, run.reason)
    ended = [e.data for e in again.store.events(parent_id) if e.kind == "child_ended"]
    assert ended == [{"child_run_id": child.run_id, "agent": "triage", "status": "succeeded",
                      "code": "succeeded", "reason": "finished before the crash"}]


def test_a_delegation_that_needs_approval_starts_the_child_once_a_person_approves(stack, policy_dir,
                                                                                 checkpoint_server):
    (policy_dir / "rules" / "delegation.yaml").write_text(
        "kind: Rule\nname: delegations-need-approval\neffect: approve_if\ncondition: 'true'\n"
        "actions: [delegation]\nreason: a person approves every child run\n")
    checkpoint_server.store.reload()
    d = stack.driver()
    parent_id = start(stack, d, [delegate(), final(summarised="child succeeded")], {"triage": TRIAGE_OK})
    run = settle(d, parent_id)
    assert run.status == "awaiting_approval" and d.store.children(parent_id) == []
    [approval] = d.store.approvals(parent_id, status="pending")
    d.approve(approval.approval_id, "bob", spawn=True,
              approval_token=stack.approval_token(d, approval.approval_id))
    run = settle(d, parent_id)
    assert run.status == SUCCEEDED, (run.code, run.reason)
    verdicts = [x for x in decisions(d, parent_id) if x[0] == "delegation"]
    assert verdicts == [("delegation", "REQUIRE_APPROVAL", "approval_required"), ("delegation", "ALLOW", "allowed")]
    assert len(d.store.children(parent_id)) == 1


def test_child_scripts_are_checked_with_their_lines() -> None:
    text = "responses: []\ndelegates:\n  triage:\n    responses:\n      - bogus: 1\n"
    with pytest.raises(ScriptError, match=r"script:5: response 0 has unknown keys \['bogus'\]"):
        parse_script(text)
    with pytest.raises(ScriptError, match="'delegates' maps agent names to scripts"):
        parse_script("responses: []\ndelegates: [triage]\n")
    nested = parse_script("responses: []\ndelegates: {triage: [{text: hi}]}\n")
    assert nested["delegates"]["triage"]["responses"] == [{"text": "hi"}]


def test_a_driver_stopped_between_the_decision_and_the_child_refuses_the_call_and_goes_on(stack, monkeypatch):
    d = stack.driver()

    def crash(*_: Any, **__: Any) -> None:
        raise RuntimeError("the driver stopped here")

    monkeypatch.setattr(d, "_start_child", crash)
    with pytest.raises(RuntimeError, match="stopped here"):
        start(stack, d, [delegate(), {"action": "handoff", "reason": "no child"}], {"triage": TRIAGE_OK})
    [parent] = d.store.runs()
    [pending] = [c for c in d.store.calls(parent.run_id) if c["tool"] == "delegate"]
    assert pending["status"] == "awaiting_child" and not d.store.has_run(pending["child_run_id"])
    d.stop()
    again = stack.driver()
    assert again.recover() == [parent.run_id]
    run = settle(again, parent.run_id)
    assert run.status == PAUSED and run.code == "handoff"
    [refused] = [c for c in again.store.calls(parent.run_id) if c["tool"] == "delegate"]
    assert refused["status"] == "done" and refused["code"] == "child_not_started"
    assert again.store.children(parent.run_id) == []


def test_the_delegate_tool_schema_and_its_validator_name_the_same_fields() -> None:
    from driver.context import delegate_tool_schema
    from driver.steps.delegation import Delegate, DelegateBudget, DelegateScope

    schema = delegate_tool_schema(["triage"])["properties"]
    assert set(schema) == set(Delegate.model_fields)
    assert set(schema["budget"]["properties"]) == set(DelegateBudget.model_fields)
    assert set(schema["narrowing"]["properties"]) == set(DelegateScope.model_fields)


def test_a_parent_whose_child_outcome_was_stored_before_a_crash_goes_on_after_recover(stack):
    d, parent_id, child = _parent_waiting_on_a_paused_child(stack)
    # The crash window inside the settling: the call holds the outcome, the parent still waits.
    d.store.set_status(child.run_id, SUCCEEDED, "succeeded", "done")
    call = d.store.call_for_child(child.run_id)
    d.store.update_call(call["id"], status="done", result={"is_error": False, "content": "child done"})
    assert d.store.run(parent_id).status == AWAITING_CHILD
    again = stack.driver()
    again.recover()
    run = settle(again, parent_id)
    assert run.status == SUCCEEDED, (run.code, run.reason)


def test_a_run_waits_for_its_child_only_while_the_call_does(tmp_path) -> None:
    from driver.runs.model import RUNNING
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(tmp_path / "d.db")
    run = store.create_run(run_id="run-1", agent="recon", agent_version="v", tenant="t", owner="alice")
    pk = store.add_call(run.run_id, 0, 0, call_id="c", tool="delegate", arguments={}, args_sha="", plan_step="")
    store.update_call(pk, status="awaiting_child", child_run_id="run-child")
    assert store.wait_for_child(run.run_id, pk, "waiting") and store.run(run.run_id).status == AWAITING_CHILD
    store.transition(run.run_id, AWAITING_CHILD, RUNNING, "", "")
    store.update_call(pk, status="done")  # the child's outcome arrived first
    assert not store.wait_for_child(run.run_id, pk, "waiting") and store.run(run.run_id).status == RUNNING


def test_a_parent_cancelled_while_its_child_is_created_leaves_the_child_unstarted(stack, monkeypatch):
    d = stack.driver()
    real = d._start_child

    def cancel_parent_first(parent: dict[str, Any], *args: Any) -> dict[str, Any]:
        d.cancel(parent.run_id, "alice", "changed my mind")
        return real(parent, *args)

    monkeypatch.setattr(d, "_start_child", cancel_parent_first)
    parent_id = start(stack, d, [delegate()], {"triage": TRIAGE_OK})
    [child] = d.store.children(parent_id)
    d.wait(child.run_id, timeout=10)
    child = d.store.run(child.run_id)
    assert d.store.run(parent_id).status == "cancelled"
    assert child.status == "cancelled" and child.model_attempts == 0
    assert d.store.receipts(child.run_id) == []


def test_cancelling_a_parent_whose_child_just_ended_still_cancels_the_parent(stack, monkeypatch):
    d = stack.driver()
    parent_id = start(stack, d, [delegate()], {"triage": [{"action": "handoff", "reason": "wait"}]})
    settle(d, parent_id)
    [child] = d.store.children(parent_id)
    d.store.set_status(child.run_id, SUCCEEDED, "succeeded", "ended just now")
    stale = [child]  # listed while it still ran
    monkeypatch.setattr(d.store, "children", lambda run_id: stale if run_id == parent_id else [])
    d.cancel(parent_id, "alice")
    assert d.store.run(parent_id).status == "cancelled"
    assert "run_cancelled" in kinds(d, parent_id)


def test_the_tree_budget_counts_every_run_of_the_tree(stack):
    d = stack.driver()
    goal = parse_goal({"objective": "Get task-abc123 summarised.", "budget": {"tree_tokens": 1000},
                       "criteria": [{"id": "summarised", "description": "a summary came back"}]})
    script = {"responses": [{"actions": [delegate()], "usage": {"input_tokens": 300, "output_tokens": 300}}],
              "delegates": {"triage": {"responses": [{"actions": [TRIAGE_PLAN],
                                                      "usage": {"input_tokens": 250, "output_tokens": 250}},
                                                     call("get_task", task_id="task-abc123")]}}}
    run = d.start_run("recon", goal, owner="alice", provider="scripted",
                      provider_options={"script": parse_script_dict(script)}, spawn=False)
    d.run_until_stopped(run.run_id)
    settle(d, run.run_id)
    [child] = d.store.children(run.run_id)
    child = d.store.run(child.run_id)
    # neither run alone reached 1000 tokens (600 and 500); the tree did
    assert (child.status, child.code) == (PAUSED, "breaker_tree_budget")
    assert child.total_tokens == 500 and child.budget["tree_tokens"] == 1000
    assert d.store.tree(run.run_id) == (2, 1100)


def _three_turn_goal(**budget: int) -> Any:
    return parse_goal({"objective": "Get task-abc123 summarised.", "budget": budget or {"turns": 3},
                       "criteria": [{"id": "summarised", "description": "a summary came back"}]})


def _start_with(d: Any, goal: Any, responses: list[Any], children: dict[str, Any]) -> str:
    script = {"responses": responses, "delegates": {k: {"responses": v} for k, v in children.items()}}
    run = d.start_run("recon", goal, owner="alice", provider="scripted",
                      provider_options={"script": parse_script_dict(script)}, spawn=False)
    d.run_until_stopped(run.run_id)
    settle(d, run.run_id)
    return str(run.run_id)


def test_a_child_is_granted_only_the_turns_its_parent_has_left(stack):
    """A 3-turn budget allowed 5 turns over parent and child. Turns count across the tree:
    the parent used 1 turn to delegate, so its child may take 2, and the third turn halts it."""
    d = stack.driver()
    parent_id = _start_with(d, _three_turn_goal(), [delegate(), final(summarised="the child summarised it")],
                            {"triage": TRIAGE_OK})
    [child] = d.store.children(parent_id)
    parent, child = d.store.run(parent_id), d.store.run(child.run_id)
    assert child.budget["turns"] == 2  # 3 minus the parent's turn that delegated
    assert (child.status, child.code) == (PAUSED, "breaker_turns")
    assert parent.status == AWAITING_CHILD
    assert parent.total_turns + child.total_turns == 3
    # the parent's counters carry its child's turns
    counters = d._counters(parent)
    assert (counters.stretch_turns, counters.descendant_stretch_turns) == (1, 2)
    assert (counters.total_turns, counters.descendant_total_turns) == (1, 2)


def test_the_parent_counts_its_childrens_turns_when_it_checks(stack):
    d = stack.driver()
    two_turns = [TRIAGE_PLAN, final(c1="the plan was accepted; nothing else to read")]
    parent_id = _start_with(d, _three_turn_goal(), [delegate(), final(summarised="done")], {"triage": two_turns})
    parent = d.store.run(parent_id)
    [child] = d.store.children(parent_id)
    # turn 1 delegates; the child succeeds in its 2 turns; the tree has used 3: the parent's next
    # model call halts instead of giving it a fourth
    assert (child.status, child.budget["turns"], child.total_turns) == (SUCCEEDED, 2, 2)
    assert (parent.status, parent.code) == (PAUSED, "breaker_turns"), (parent.code, parent.reason)
    assert parent.total_turns == 1
    assert [x for x in decisions(d, parent_id) if x[1] == "HALT"] == [("model_call", "HALT", "breaker_turns")]
    assert "2 of them by runs below" in parent.reason


def test_a_delegation_in_the_parents_last_turn_halts_the_child_would_have_none(stack):
    d = stack.driver()
    parent_id = _start_with(d, _three_turn_goal(turns=1), [delegate()], {"triage": TRIAGE_OK})
    parent = d.store.run(parent_id)
    assert (parent.status, parent.code) == (PAUSED, "breaker_turns")
    assert d.store.children(parent_id) == []
    assert ("delegation", "HALT", "breaker_turns") in decisions(d, parent_id)


def test_lifetime_turns_count_across_the_tree_and_a_resume_does_not_reset_them(stack):
    d = stack.driver()
    quick = [final(c1="nothing to read: the task has no findings")]
    parent_id = _start_with(d, _three_turn_goal(turns=2, turns_total=4),
                            [delegate(), delegate(), final(summarised="done")], {"triage": quick})
    # stretch 1: turn 1 delegates (child 1 takes 1 turn): the stretch's 2 turns are used
    parent = d.store.run(parent_id)
    assert (parent.status, parent.code) == (PAUSED, "breaker_turns")
    d.resume(parent_id, "alice", raise_budget={"turns": 10}, spawn=False)
    d.run_until_stopped(parent_id)
    parent = settle(d, parent_id)
    children = d.store.children(parent_id)
    # stretch 2: turn 2 delegates with 4 - 2 - 1 = 1 lifetime turn left for the child; then the
    # tree's 4 lifetime turns are used and the parent halts on turns_total
    assert [c.budget["turns_total"] for c in children] == [3, 1]
    assert (parent.status, parent.code) == (PAUSED, "breaker_turns_total"), parent.reason
    assert parent.total_turns + sum(c.total_turns for c in children) == 4
    counters = d._counters(parent)
    assert (counters.descendant_stretch_turns, counters.descendant_total_turns) == (1, 2)
