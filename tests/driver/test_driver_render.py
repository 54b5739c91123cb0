"""What `warden run` / `warden watch` print for the events a person must act on."""

from __future__ import annotations

from driver.render import event_line


def test_a_plan_waiting_for_approval_is_shown_step_by_step():
    line = event_line("approval_requested", {
        "approval_id": "apv-1", "tool": "propose_plan", "reason": "plans of recon need a person",
        "arguments": {"steps": [{"id": "list", "tool": "list_templates", "description": "see the templates"},
                                {"id": "scan", "tool": "create_task_from_template",
                                 "arguments": {"target": "web.lab.example.com"}}]}})
    assert "approval apv-1 for the plan:" in line
    assert "1. list: list_templates (see the templates)" in line
    assert "2. scan: create_task_from_template" in line and "web.lab.example.com" in line
    assert "warden approve apv-1" in line and "warden reject apv-1" in line


def test_a_call_waiting_for_approval_is_shown_with_its_arguments():
    line = event_line("approval_requested", {"approval_id": "apv-2", "tool": "cancel_task", "reason": "r",
                                             "arguments": {"task_id": "task-9"}})
    assert "approval apv-2 for cancel_task" in line and "task-9" in line
