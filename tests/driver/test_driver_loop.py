"""The governed loop against a real checkpoint and a real toolrunner (Docker)."""

from __future__ import annotations

from driver_harness import PLAN, call, decisions, final, goal, kinds


def test_happy_path_runs_in_a_container_and_succeeds_verified(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="web.lab.example.com"),
                          call("get_task", task_id="task-abc123"),
                          final(reported="get_task said succeeded")])
    assert run.status == "succeeded", (run.code, run.reason)
    receipts = d.store.receipts(run.run_id)
    assert [r["tool"] for r in receipts] == ["create_task_from_template", "get_task"]
    assert receipts[0]["exit_code"] == 0 and '"status":"queued"' in receipts[0]["output"]
    assert ("plan", "ALLOW", "allowed") in decisions(d, run.run_id)
    assert run.total_turns == 4 and run.agent_version


def test_denied_call_is_fed_back_as_data_and_counts_as_a_failure(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="payments.lab.example.com"),
                          {"action": "handoff", "reason": "blocked"}])
    assert run.status == "paused" and run.code == "handoff"
    assert ("tool_call", "DENY", "subject_off_limits") in decisions(d, run.run_id)
    assert d.store.receipts(run.run_id) == []
    results = [e for e in d.store.transcript(run.run_id) if e["role"] == "results"]
    refusal = results[-1]["results"][0]
    assert refusal["is_error"] and 'code="subject_off_limits"' in refusal["content"]
    assert "<data" in refusal["content"]
    assert d.store.run(run.run_id).consecutive_failures == 1


def test_refused_plan_stops_the_run_before_any_tool_runs(stack):
    d = stack.driver()
    bad_plan = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
        {"id": "a", "tool": "list_templates"}, {"id": "b", "tool": "cancel_task"}]}}
    run = stack.start(d, [bad_plan, call("list_templates")])
    assert run.status == "failed" and run.code == "plan_refused"
    assert "b:" in run.reason
    assert d.store.receipts(run.run_id) == []
    assert run.model_attempts == 1


def test_tool_call_before_a_plan_is_refused(stack):
    d = stack.driver()
    run = stack.start(d, [call("list_templates"), {"action": "handoff", "reason": "x"}])
    calls = d.store.calls(run.run_id)
    assert calls[0]["code"] == "plan_required" and d.store.receipts(run.run_id) == []


def test_drift_is_counted_for_calls_that_serve_no_step(stack):
    d = stack.driver()
    plan = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
        {"id": "list", "tool": "list_templates"}]}}
    run = stack.start(d, [plan, call("get_task", task_id="task-x1"), {"action": "handoff", "reason": "x"}])
    assert run.drift == 1
    drifted = [e for e in d.store.events(run.run_id) if e.kind == "decision" and e.data.get("counts_as_drift")]
    assert drifted and drifted[0].data["tool"] == "get_task"


def test_idle_turn_gets_one_nudge_then_pauses(stack):
    d = stack.driver()
    run = stack.start(d, [{"text": "hmm"}, {"text": "still thinking"}])
    assert run.status == "paused" and run.code == "no_progress"
    assert kinds(d, run.run_id).count("nudged") == 1
    notes = [e for e in d.store.transcript(run.run_id) if e["role"] == "user"]
    assert "started nothing" in notes[-1]["text"]


def test_boundary_rejection_is_fed_back_and_counted(stack):
    d = stack.driver()
    run = stack.start(d, [{"action": "tool_call", "tool": "list_templates", "arguments": {}, "approved": True},
                          {"action": "tool_call", "tool": "cancel_task", "arguments": {}},
                          {"action": "handoff", "reason": "x"}])
    rejected = [e.data["code"] for e in d.store.events(run.run_id) if e.kind == "reply_rejected"]
    assert rejected == ["unknown_field", "tool_not_in_contract"]
    assert d.store.run(run.run_id).consecutive_failures == 2
    notes = [e["text"] for e in d.store.transcript(run.run_id) if e["role"] == "user"]
    assert any("unknown_field" in n for n in notes)


def test_cut_off_reply_pauses_as_handoff(stack):
    d = stack.driver()
    run = stack.start(d, [{"stop_reason": "max_tokens", "actions": [call("list_templates")]}])
    assert run.status == "paused" and run.code == "cut_off"
    assert d.store.calls(run.run_id) == []


def test_final_without_verification_pauses_listing_what_is_missing(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, {"action": "final", "outcomes": [
        {"criterion": "scan_ran", "met": True, "evidence": "trust me"},
        {"criterion": "reported", "met": True}]}])
    assert run.status == "paused" and run.code == "criteria_unmet"
    assert any(m.startswith("scan_ran:") for m in run.missing)
    assert any(m.startswith("reported:") for m in run.missing)


def test_approval_then_run_records_the_approver(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="10.20.0.0/24"),
                          final(reported="ok")])
    assert run.status == "awaiting_approval"
    [approval] = d.store.approvals(run.run_id, status="pending")
    assert approval.tool == "create_task_from_template"
    assert d.store.receipts(run.run_id) == []
    d.approve(approval.approval_id, "bob", "fine, lab subnet", spawn=False,
              approval_token=stack.approval_token(d, approval.approval_id))
    run = d.run_until_stopped(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    assert d.store.approval(approval.approval_id).decided_by == "bob"
    assert [r["tool"] for r in d.store.receipts(run.run_id)] == ["create_task_from_template"]


def test_rejection_by_a_person_is_fed_back_and_nothing_runs(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="10.20.0.0/24"),
                          {"action": "handoff", "reason": "rejected"}])
    [approval] = d.store.approvals(run.run_id, status="pending")
    d.reject(approval.approval_id, "bob", "too wide", spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert d.store.receipts(run.run_id) == []
    results = [e for e in d.store.transcript(run.run_id) if e["role"] == "results"]
    assert "too wide" in results[-1]["results"][0]["content"]
    assert d.store.approval(approval.approval_id).status == "rejected"


def test_a_plan_that_needs_approval_waits_for_a_person_then_the_run_goes_on(stack, policy_dir, checkpoint_server):
    (policy_dir / "rules" / "plans.yaml").write_text(
        "kind: Rule\nname: plans-are-read-first\neffect: approve_if\nactions: [plan]\ncondition: 'true'\n"
        "reason: a person reads the plan before the run goes on\n")
    assert checkpoint_server.store.reload()
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="web.lab.example.com"),
                          final(reported="ok")])
    assert (run.status, run.code) == ("awaiting_approval", "approval_required")
    [approval] = d.store.approvals(run.run_id, status="pending")
    assert approval.tool == "propose_plan" and len(approval.arguments["steps"]) == 3  # the plan, shown
    assert d.store.receipts(run.run_id) == []  # nothing ran before the plan was read
    d.approve(approval.approval_id, "bob", "plan reads fine", spawn=False,
              approval_token=stack.approval_token(d, approval.approval_id))
    run = d.run_until_stopped(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    assert [r["tool"] for r in d.store.receipts(run.run_id)] == ["create_task_from_template"]


def test_a_handoff_rule_pauses_the_run_for_the_person_it_names(stack):
    d = stack.driver()
    plan = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
        {"id": "refund", "tool": "propose_refund"}]}}
    refund = call("propose_refund", invoice_id="inv-7", payment_id="pay_9", customer="customer:bob",
                  amount_usd=900, reason="double charge")
    run = stack.start(d, [plan, refund, final(reported="ok")], agent="refunds")
    assert (run.status, run.code) == ("paused", "handoff")  # neither a denial nor a success
    assert "handed off to refunds-desk" in run.reason
    paused = [e.data for e in d.store.events(run.run_id) if e.kind == "run_paused"]
    assert paused[-1]["handoff_to"] == "refunds-desk" and paused[-1]["rule"] == "rule:refund-above-500-is-a-handoff"
    assert d.store.receipts(run.run_id) == []


def _model_calls_need_approval(policy_dir, checkpoint_server) -> None:
    (policy_dir / "rules" / "models.yaml").write_text(
        "kind: Rule\nname: model-calls-are-read-first\neffect: approve_if\nactions: [model_call]\n"
        "condition: 'counters.total_turns == 0'\nreason: a person approves the first model call\n")
    assert checkpoint_server.store.reload()


def test_a_model_call_that_needs_approval_waits_then_the_run_goes_on(stack, policy_dir, checkpoint_server):
    _model_calls_need_approval(policy_dir, checkpoint_server)
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="web.lab.example.com"),
                          final(reported="ok")])
    assert (run.status, run.code) == ("awaiting_approval", "approval_required")
    [approval] = d.store.approvals(run.run_id, status="pending")
    assert approval.tool == "(model call)" and approval.arguments["model"] == run.model
    assert run.total_turns == 0  # the model was not asked
    d.approve(approval.approval_id, "bob", spawn=False,
              approval_token=stack.approval_token(d, approval.approval_id))
    run = d.run_until_stopped(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    assert d.store.approval(approval.approval_id).status == "used"  # relayed once, never again


def test_a_rejected_model_call_pauses_the_run_for_a_person(stack, policy_dir, checkpoint_server):
    _model_calls_need_approval(policy_dir, checkpoint_server)
    d = stack.driver()
    run = stack.start(d, [PLAN, final(reported="ok")])
    [approval] = d.store.approvals(run.run_id, status="pending")
    run = d.reject(approval.approval_id, "bob", "not now", spawn=False)
    assert (run.status, run.code) == ("paused", "approval_rejected") and run.total_turns == 0


def test_inputs_the_operator_vouches_for_reach_the_rules_as_run_inputs(stack, policy_dir, checkpoint_server):
    (policy_dir / "rules" / "session.yaml").write_text(
        "kind: Rule\nname: only-the-sessions-customer\neffect: deny_if\ntools: [lookup_order]\n"
        "condition: 'has(run.inputs.customer) && args.customer != run.inputs.customer'\n"
        "reason: an agent works on the customer of its session only\n")
    assert checkpoint_server.store.reload()
    d = stack.driver()
    plan = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
        {"id": "look", "tool": "lookup_order"}]}}
    other = call("lookup_order", order_id="ord-1", customer="customer:jane")
    run = d.start_run("refunds", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": [plan, other, {"action": "handoff", "reason": "x"}]},
                      inputs={"customer": "customer:bob"})
    d.run_until_stopped(run.run_id)
    assert ("tool_call", "DENY", "rule_denied") in decisions(d, run.run_id)
    start = next(r for r in checkpoint_server.log.read(run_id=run.run_id) if r["action"] == "start_run")
    assert start["arguments"]["inputs"] == {"customer": "customer:bob"}  # bound at the start, on the record
