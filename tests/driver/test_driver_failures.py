"""Fail closed: peers down, a driver that crashes mid-run and comes back."""

from __future__ import annotations

import dataclasses
import socket
import sqlite3
import threading
from typing import Any

import pytest
from driver_harness import PLAN, call, final, goal

from driver.errors import RunStateError
from driver.runs.model import Event, RunStatus

SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
SCRIPT = [PLAN, SCAN, call("get_task", task_id="task-abc"), final(reported="succeeded")]


def dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_checkpoint_down_pauses_with_a_clear_code_and_runs_nothing(stack, checkpoint_server):
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", provider_options={"script": SCRIPT},
                      spawn=False)
    checkpoint_server.stop(0)
    run = d.run_until_stopped(run.run_id)
    assert run.status == "paused" and run.code == "checkpoint_unavailable"
    assert run.model_attempts == 0  # not even the model was called unchecked
    assert d.store.receipts(run.run_id) == []


def test_toolrunner_down_pauses_then_the_same_grant_runs_after_resume(stack):
    down = stack.driver(toolrunner=dead_address())
    run = down.start_run("recon", goal(), owner="alice", provider="scripted", provider_options={"script": SCRIPT},
                         spawn=False)
    run = down.run_until_stopped(run.run_id)
    assert run.status == "paused" and run.code == "toolrunner_unavailable"
    [scan] = [c for c in down.store.calls(run.run_id) if c["tool"] == SCAN["tool"]]
    assert scan["status"] == "executing" and scan["grant"]
    decision_id = scan["decision_id"]
    down.store.close()

    up = stack.driver()  # a restarted driver, same store, the toolrunner back
    up.resume(run.run_id, "alice", "toolrunner is back", spawn=False)
    run = up.run_until_stopped(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    receipts = up.store.receipts(run.run_id)
    assert receipts[0]["decision_id"] == decision_id  # the grant issued before the outage


def test_driver_crash_mid_run_is_recovered_from_the_store(stack):
    first = stack.driver()
    run = first.start_run("recon", goal(), owner="alice", provider="scripted", provider_options={"script": SCRIPT},
                          spawn=False)
    first.run_until_stopped(run.run_id, max_steps=3)  # plan, its result, the scan's model turn: then "crash"
    mid = first.store.run(run.run_id)
    assert mid.status == "running" and mid.total_turns == 2
    first.store.close()

    second = stack.driver()
    assert second.recover() == [run.run_id]
    second.wait(run.run_id, timeout=120)
    run = second.store.run(run.run_id)
    assert run.status == "succeeded", (run.code, run.reason)
    assert run.total_turns == 4  # no model turn repeated, none lost
    assert [r["tool"] for r in second.store.receipts(run.run_id)] == ["create_task_from_template", "get_task"]
    assert "run_recovered" in [e.kind for e in second.store.events(run.run_id)]


def test_cancel_stops_the_run_and_its_pending_approval(stack):
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": [PLAN, call("create_task_from_template", template="web",
                                                                target="10.20.0.0/24")]})
    run = d.run_until_stopped(run.run_id)
    assert run.status == "awaiting_approval"
    run = d.cancel(run.run_id, "alice", "not today")
    assert run.status == "cancelled"
    assert d.store.approvals(run.run_id)[0].status == "cancelled"
    assert d.run_until_stopped(run.run_id).status == "cancelled"


def test_a_cancel_landing_inside_an_approval_or_a_resume_stays_a_cancel(stack, monkeypatch):
    d = stack.driver()
    script = [PLAN, call("create_task_from_template", template="web", target="10.20.0.0/24")]
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": script})
    run = d.run_until_stopped(run.run_id)
    [approval] = d.store.approvals(run.run_id, status="pending")
    real_update_call = d.store.update_call

    def cancel_first(pk: int, **fields: Any) -> None:  # the person's cancel wins the race
        if fields.get("status") == "approved":
            d.store.set_status(run.run_id, "cancelled", "cancelled", "cancelled by carol")
        real_update_call(pk, **fields)

    monkeypatch.setattr(d.store, "update_call", cancel_first)
    assert d.approve(approval.approval_id, "bob", spawn=False,
                     approval_token=stack.approval_token(d, approval.approval_id)).status == "cancelled"

    paused = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                         provider_options={"script": [{"action": "handoff", "reason": "x"}]})
    paused = d.run_until_stopped(paused.run_id)
    assert paused.status == "paused"
    # resume reads "paused", then a cancel lands before it moves the run
    d.store.set_status(paused.run_id, "cancelled", "cancelled", "cancelled by carol")
    real_run, reads = d.store.run, []

    def stale_first_read(run_id: str) -> dict[str, Any]:
        row = real_run(run_id)
        if run_id == paused.run_id and not reads:
            reads.append(run_id)
            return dataclasses.replace(row, status=RunStatus.PAUSED, code="handoff")
        return row

    monkeypatch.setattr(d.store, "run", stale_first_read)
    with pytest.raises(RunStateError, match="is cancelled, not paused"):
        d.resume(paused.run_id, "alice", spawn=False)
    assert real_run(paused.run_id).status == "cancelled"
    with pytest.raises(RunStateError, match="already cancelled"):
        d.cancel(paused.run_id, "alice")


def test_a_run_ends_once_with_exactly_one_final_event(tmp_path) -> None:
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(tmp_path / "d.db")
    run = store.create_run(run_id="run-1", agent="recon", agent_version="v", tenant="t", owner="alice")
    assert store.set_status_logged(run.run_id, "cancelled", "cancelled", "by carol", person="carol")
    # the model's final answer arrives a moment later: it loses, and leaves no event behind
    assert not store.set_status_logged(run.run_id, "succeeded", "succeeded", "done")
    finals = [e for e in store.events(run.run_id) if e.kind.startswith("run_")]
    assert [(e.kind, e.data["code"]) for e in finals] == [("run_cancelled", "cancelled")]
    assert store.run(run.run_id).status == "cancelled"


def test_a_status_and_its_event_are_one_transaction(tmp_path, monkeypatch) -> None:
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(tmp_path / "d.db")
    run = store.create_run(run_id="run-1", agent="recon", agent_version="v", tenant="t", owner="alice")

    def broken(*_: Any, **__: Any) -> int:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "append_event", broken)
    with pytest.raises(sqlite3.OperationalError):
        store.set_status_logged(run.run_id, "succeeded", "succeeded", "done")
    monkeypatch.undo()
    reopened = SqliteRunStore(tmp_path / "d.db")
    assert reopened.run(run.run_id).status == "running" and reopened.events(run.run_id) == []


def test_a_watcher_of_a_cancel_reads_what_could_not_be_stopped_before_the_end(stack) -> None:
    d = stack.driver(toolrunner=dead_address())  # nobody listens there: the stop cannot be sent
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": [{"action": "handoff", "reason": "x"}]})
    run = d.run_until_stopped(run.run_id)
    seen: list[str] = []
    stop = threading.Event()
    watcher = threading.Thread(target=lambda: seen.extend(
        e.kind for e in d.store.follow(run.run_id, 0, stop, poll_seconds=0.05)))
    watcher.start()
    d.cancel(run.run_id, "alice")
    watcher.join(60)
    assert not watcher.is_alive()
    assert seen[-2:] == ["cancel_incomplete", "run_cancelled"]


def test_a_watcher_that_stops_at_a_pause_still_reads_the_pause(tmp_path, monkeypatch) -> None:
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(tmp_path / "d.db")
    run = store.create_run(run_id="run-1", agent="recon", agent_version="v", tenant="t", owner="alice")
    store.append_event(run.run_id, "run_started")
    real_events, reads = store.events, []

    def pause_right_after_an_empty_read(run_id: str, after_seq: int = 0, limit: int = 1000) -> list:
        got = real_events(run_id, after_seq, limit)
        reads.append(len(got))
        if not got and reads.count(0) == 1:  # the pause lands between this read and the status check
            store.set_status_logged(run_id, "paused", "handoff", "over to a person")
        return got

    monkeypatch.setattr(store, "events", pause_right_after_an_empty_read)
    kinds = [e.kind for e in store.follow(run.run_id, 0, threading.Event(), poll_seconds=0.01,
                                               until_waiting=True)]
    assert kinds == ["run_started", "run_paused"]


def test_a_watch_that_starts_after_the_end_ends_at_once(tmp_path) -> None:
    from driver.runs.sqlite import SqliteRunStore

    store = SqliteRunStore(tmp_path / "d.db")
    run = store.create_run(run_id="run-1", agent="recon", agent_version="v", tenant="t", owner="alice")
    store.set_status_logged(run.run_id, "succeeded", "succeeded", "done")
    last = store.events(run.run_id)[-1].seq
    seen: list[Event] = []
    watcher = threading.Thread(target=lambda: seen.extend(
        store.follow(run.run_id, last, threading.Event(), poll_seconds=0.01, final_grace_seconds=3600)),
        daemon=True)
    watcher.start()
    watcher.join(60)
    assert not watcher.is_alive() and seen == []  # nothing new, and no wait for a final event it already had


def test_a_cancel_landing_while_a_call_is_decided_runs_nothing_after_it(stack, monkeypatch):
    """The person cancels while the checkpoint decides a call (which it allows): the cancel stops
    what runs for the run, and nothing starts after it. The driver used to send the allowed call
    to the toolrunner anyway: the tool ran for a cancelled run, its receipt after `run_cancelled`."""
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": [PLAN, SCAN, final(reported="x")]})
    real_check = d.checkpoint.check

    def cancel_during_the_check(request: Any) -> Any:
        answer = real_check(request)
        if request.HasField("tool_call"):
            d.cancel(run.run_id, "carol", "stop everything")
        return answer

    monkeypatch.setattr(d.checkpoint, "check", cancel_during_the_check)
    run = d.run_until_stopped(run.run_id)
    assert run.status == "cancelled"
    assert d.store.receipts(run.run_id) == []  # nothing ran for the cancelled run
    [scan] = [c for c in d.store.calls(run.run_id) if c["tool"] == "create_task_from_template"]
    assert (scan["status"], scan["verdict"], scan["code"]) == ("done", "ALLOW", "cancelled")
    assert scan["decision_id"] and scan["result"]["is_error"]  # the checkpoint's ALLOW stays on the record
    kinds = [e.kind for e in d.store.events(run.run_id)]
    assert "tool_receipt" not in kinds
    assert kinds[kinds.index("run_cancelled") + 1:] == ["decision"]  # the ALLOW the check answered, recorded


def test_an_approval_decided_while_a_cancel_lands_does_not_break_the_cancel(stack, monkeypatch):
    """The approver's ApproveCall read the run as awaiting approval just before the person's cancel
    moved it; the approval is decided between the cancel's listing of pending approvals and its
    closing them. The cancel used to fail there (`approval_not_pending`) with the run already
    cancelled: no `run_cancelled` event, the toolrunner never told, a parent never settled."""
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", spawn=False,
                      provider_options={"script": [PLAN, call("create_task_from_template", template="web",
                                                                target="10.20.0.0/24")]})
    run = d.run_until_stopped(run.run_id)
    [approval] = d.store.approvals(run.run_id, status="pending")
    token = stack.approval_token(d, approval.approval_id)
    real_decide = d.store.decide_approval

    def approver_first(approval_id: str, status: str, person: str, note: str = "", token_: str = "",
                       **kw: Any) -> dict[str, Any]:
        if status == "cancelled":  # the approver's decision, already past its status check, lands first
            real_decide(approval_id, "approved", "bob", "", token=token)
        return real_decide(approval_id, status, person, note, **kw)

    monkeypatch.setattr(d.store, "decide_approval", approver_first)
    run = d.cancel(run.run_id, "alice", "not today")
    assert run.status == "cancelled"
    kinds = [e.kind for e in d.store.events(run.run_id)]
    assert kinds[-1] == "run_cancelled"
    assert d.run_until_stopped(run.run_id).status == "cancelled"
    assert d.store.receipts(run.run_id) == []  # the approved call never runs for a cancelled run
