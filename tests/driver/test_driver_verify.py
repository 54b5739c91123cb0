"""System-checked criteria that refer to the run's own receipts (`call_ok`).

A `call_ok` criterion makes the driver call a tool itself when the model reports final, with
arguments taken from this run's own receipts (the task it created), through the real checkpoint
and toolrunner. These tests play it through the real loop, and the goal format's errors.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from driver_harness import PLAN, call

from driver.errors import GoalError
from driver.goal import load_goal, parse_goal
from driver.runs.model import PAUSED, SUCCEEDED
from driver.service import goal_from_proto, goal_to_proto
from driver.verify import Unresolved, call_arguments

SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
OWN_TASK_CHECK = {"kind": "call_ok", "tool": "get_task",
                  "arguments_from": {"task_id": {"receipt": "create_task_from_template", "field": "task_id"}}}


def goal(wanted: str = '"status":"succeeded"', **check: Any) -> Any:
    return parse_goal({
        "objective": "Scan web.lab.example.com and see the scan finish.",
        "criteria": [{"id": "finished", "description": "the scan this run started finished",
                      "check": {**OWN_TASK_CHECK, "output_contains": wanted, **check}}],
    })


def final(evidence: str = "get_task says succeeded") -> dict[str, Any]:
    return {"action": "final", "summary": "the scan finished",
            "outcomes": [{"criterion": "finished", "met": True, "evidence": evidence}]}


def own_task(d: Any, run_id: str) -> str:
    [receipt] = [r for r in d.store.receipts(run_id) if r["tool"] == "create_task_from_template"]
    return str(json.loads(receipt["output"])["task_id"])


def verification_decisions(d: Any, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in d.store.events(run_id) if e.kind == "decision" and e.data.get("verifies")]


def logged_get_task_ids(checkpoint_server: Any, run_id: str) -> list[str]:
    return [r["arguments"]["task_id"] for r in checkpoint_server.log.read(run_id=run_id)
            if r["action"] == "tool_call" and r["tool"] == "get_task"]


def test_the_criterion_passes_when_the_runs_own_task_is_in_the_wanted_state(stack, checkpoint_server):
    d = stack.driver()
    # the model reads some other task and names it in its report: neither is what is checked
    run = stack.start(d, [PLAN, SCAN, call("get_task", task_id="task-abc123"),
                          final('{"task_id":"task-abc123","status":"succeeded"}')], goal())
    assert run.status == SUCCEEDED, (run.code, run.reason)
    task = own_task(d, run.run_id)
    assert task != "task-abc123"
    # the driver's call: decided by the checkpoint (recorded in its log) and run by the toolrunner
    [decided] = verification_decisions(d, run.run_id)
    assert (decided["verdict"], decided["verifies"], decided["arguments"]) == ("ALLOW", "finished", {"task_id": task})
    assert logged_get_task_ids(checkpoint_server, run.run_id) == ["task-abc123", task]
    [checked] = [r for r in d.store.receipts(run.run_id) if r["verifies"] == "finished"]
    assert checked["tool"] == "get_task" and f'"task_id":"{task}"' in checked["output"]
    # the model was never handed the result of a call it did not make
    for entry in d.store.transcript(run.run_id):
        for r in entry.get("results") or []:
            assert not r["call_id"].startswith("verify-")


def test_the_criterion_fails_when_the_runs_own_task_is_not_in_the_wanted_state(stack):
    d = stack.driver()
    # the fake recon API reports every task succeeded: a goal that wants it cancelled is not met,
    # whatever the model reports
    run = stack.start(d, [PLAN, SCAN, final('{"status":"cancelled"}')], goal('"status":"cancelled"'))
    assert (run.status, run.code) == (PAUSED, "criteria_unmet")
    task = own_task(d, run.run_id)
    [missing] = run.missing
    assert missing.startswith("finished: the output of the verification call get_task")
    assert task in missing and "does not contain" in missing
    assert [x["arguments"] for x in verification_decisions(d, run.run_id)] == [{"task_id": task}]


def test_a_reference_to_a_receipt_the_run_does_not_have_is_refused(stack, checkpoint_server):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("list_templates"), final()], goal())
    assert (run.status, run.code) == (PAUSED, "criteria_unmet")
    [missing] = run.missing
    assert "no successful receipt of create_task_from_template" in missing
    # nothing was called for it: no decision, no receipt
    assert verification_decisions(d, run.run_id) == []
    assert logged_get_task_ids(checkpoint_server, run.run_id) == []
    assert [r["tool"] for r in d.store.receipts(run.run_id)] == ["list_templates"]


def test_the_model_writing_the_value_in_its_reply_cannot_satisfy_it(stack, checkpoint_server):
    d = stack.driver()
    # its own scan is refused (an off-limits host), so the run created no task; the model then
    # reads another task and writes a receipt-like value for the criterion
    fake = '{"task_id":"task-abc123","status":"queued"} then {"task_id":"task-abc123","status":"succeeded"}'
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="payments.lab.example.com"),
                          call("get_task", task_id="task-abc123"), final(fake)], goal())
    assert (run.status, run.code) == (PAUSED, "criteria_unmet")
    assert [r["tool"] for r in d.store.receipts(run.run_id)] == ["get_task"]  # the model's read only
    assert "no successful receipt of create_task_from_template" in run.missing[0]
    assert verification_decisions(d, run.run_id) == []
    assert logged_get_task_ids(checkpoint_server, run.run_id) == ["task-abc123"]


def test_the_drivers_call_is_decided_like_any_a_tool_outside_the_allowlist_is_refused(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, SCAN, final()], goal(tool="cancel_task"))
    assert (run.status, run.code) == (PAUSED, "criteria_unmet")
    [decided] = verification_decisions(d, run.run_id)
    assert (decided["tool"], decided["verdict"], decided["code"]) == ("cancel_task", "DENY", "tool_not_allowed")
    assert "did not run: DENY tool_not_allowed" in run.missing[0]


def test_a_resumed_run_verifies_again_on_its_next_final(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, final(), SCAN, final()], goal())
    assert (run.status, run.code) == (PAUSED, "criteria_unmet")  # nothing scanned yet
    d.resume(run.run_id, "alice", reply="scan first", spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.status == SUCCEEDED, (run.code, run.reason)
    assert [x["arguments"] for x in verification_decisions(d, run.run_id)] == [
        {"task_id": own_task(d, run.run_id)}]


# -- the values, from receipts only ------------------------------------------------------------


def receipt(tool: str, output: str, exit_code: int = 0, code: str = "", decision_id: str = "dec-1") -> dict[str, Any]:
    return {"tool": tool, "output": output, "exit_code": exit_code, "code": code, "decision_id": decision_id}


def test_the_value_comes_from_the_latest_successful_receipt_of_that_tool():
    check = {"arguments": {"verbose": True},
             "arguments_from": {"task_id": {"receipt": "create", "field": "task_id"},
                                "first": {"receipt": "list", "field": "items.0.id"}}}
    receipts = [receipt("create", '{"task_id": "task-old"}', decision_id="d1"),
                receipt("list", '{"items": [{"id": "a"}, {"id": "b"}]}', decision_id="d2"),
                receipt("create", '{"task_id": "task-new"}', decision_id="d3"),
                receipt("create", '{"error": "x"}', exit_code=2, decision_id="d4")]
    arguments, sources = call_arguments(check, receipts)
    assert arguments == {"verbose": True, "task_id": "task-new", "first": "a"}
    assert sources == {"task_id": "d3", "first": "d2"}


@pytest.mark.parametrize("receipts, why", [
    pytest.param([], "no successful receipt of create", id="no-receipt"),
    pytest.param([receipt("create", "", exit_code=2)], "no successful receipt of create", id="only-a-failed-one"),
    pytest.param([receipt("create", "task-1 queued")], "is not JSON", id="not-json"),
    pytest.param([receipt("create", '{"id": "task-1"}')], "has no task_id in its output", id="no-such-field"),
])
def test_a_value_the_runs_receipts_do_not_hold_is_unresolved(receipts, why):
    with pytest.raises(Unresolved, match=why):
        call_arguments({"arguments_from": {"task_id": {"receipt": "create", "field": "task_id"}}}, receipts)


# -- the goal file ---------------------------------------------------------------------------------


def test_the_shipped_goal_verifies_the_task_its_run_started():
    check = load_goal(Path(__file__).resolve().parents[2] / "goals" / "recon-lab-scan.yaml").criteria[1].check
    assert check is not None and (check.kind, check.tool) == ("call_ok", "get_task")
    assert check.arguments_from is not None
    assert check.arguments_from["task_id"].receipt == "create_task_from_template"


def test_call_ok_checks_travel_through_the_driver_api_unchanged():
    g = parse_goal({"objective": "o", "criteria": [
        {"id": "a", "description": "d", "check": {**OWN_TASK_CHECK, "arguments": {"limit": 5, "deep": {"x": [1]}},
                                                  "output_contains": "ok"}}]})
    assert goal_from_proto(goal_to_proto(g)) == g


def test_goal_file_errors_name_the_line(tmp_path):
    path = tmp_path / "g.yaml"
    path.write_text("""objective: o
criteria:
  - id: no_tool
    description: d
    check:
      kind: call_ok
      arguments_from: {task_id: {receipt: create_task_from_template, field: task_id}}
  - id: not_a_call
    description: d
    check:
      kind: receipt_ok
      arguments_from: {task_id: {receipt: create_task_from_template, field: task_id}}
  - id: both
    description: d
    check:
      kind: call_ok
      tool: get_task
      arguments: {task_id: task-1}
      arguments_from: {task_id: {receipt: create_task_from_template, field: task_id}}
  - id: typo
    description: d
    check:
      kind: call_ok
      tool: get_task
      arguments_from:
        task_id: {reciept: create_task_from_template, field: task_id}
""")
    with pytest.raises(GoalError) as err:
        load_goal(path)
    lines = str(err.value).removeprefix("invalid_goal: ").splitlines()
    assert lines == [
        f"{path}:5: criteria.0.check.tool: Value error, a call_ok check names the tool the driver calls (tool: ...)",
        f"{path}:12: criteria.1.check.arguments_from: Value error, arguments_from belongs to a call_ok check "
        "(the driver's own call)",
        f"{path}:19: criteria.2.check.arguments_from: Value error, task_id: an argument is given in arguments or "
        "taken from a receipt, not both",
        f"{path}:26: criteria.3.check.arguments_from.task_id.receipt: Field required",
        f"{path}:26: criteria.3.check.arguments_from.task_id.reciept: Extra inputs are not permitted",
    ]
