"""A person pauses a run: it stops at its next step boundary, its active child runs pause with it
(`parent_paused`) and resume with it, and every pause is on the checkpoint's record first.

Real checkpoint, toolrunner and driver (the driver harness), scripted models. Nothing here
measures time: a pause that must land "during" a step is made from inside that step (a hook on
the toolrunner client or on the child's creation), and waits poll for a state with a generous
deadline that only guards against a hang.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from driver_harness import PLAN, call, final, kinds

from driver.errors import RunStateError
from driver.goal import parse_goal
from driver.providers.scripted import parse_script
from driver.runs.model import AWAITING_APPROVAL, AWAITING_CHILD, PAUSED, SUCCEEDED, TERMINAL
from driver.service import create_server
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.tokens import RUN_LABEL, unverified_claims

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_TOKEN = "bob-operator-token-0123456789"
TRIAGE_PLAN = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
    {"id": "read", "tool": "get_task"}]}}
TRIAGE_OK = [TRIAGE_PLAN, call("get_task", task_id="task-abc123"),
             {"action": "final", "summary": "no findings",
              "outcomes": [{"criterion": "c1", "met": True, "evidence": "get_task receipt"}]}]
DELEGATE = call("delegate", agent="triage", objective="Summarise task task-abc123 by severity.",
                criteria=["the findings are summarised"])
SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")


def parent_goal() -> Any:
    return parse_goal({"objective": "Get the findings of task-abc123 summarised.",
                       "criteria": [{"id": "summarised", "description": "a summary came back"}]})


def start_parent(d: Any, responses: list[Any], child: list[Any], delegate: dict[str, Any] = DELEGATE) -> str:
    """A recon run that delegates to triage (whose script is `child`), advanced until it waits."""
    script = parse_script(yaml.safe_dump({"responses": [delegate, *responses],
                                          "delegates": {"triage": {"responses": child}}}))
    run = d.start_run("recon", parent_goal(), owner="alice", provider="scripted",
                      provider_options={"script": script}, spawn=False)
    d.run_until_stopped(run.run_id)
    return str(run.run_id)


def until(d: Any, run_id: str, ok: Any, what: str, deadline: float = 90) -> dict[str, Any]:
    """Poll the store until `ok(run)` (children run on their own threads); a deadline, not a timing."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        run = d.store.run(run_id)
        if ok(run):
            return run
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} never {what}: {d.store.run(run_id).status}")


def settled(d: Any, run_id: str) -> dict[str, Any]:
    until(d, run_id, lambda r: r.status in TERMINAL or d.store.waits_for_person(run_id),
          "ended or waited for a person")
    d.wait(run_id, timeout=30)
    return d.store.run(run_id)


def acts(checkpoint_server: Any, run_id: str, act: str) -> list[dict[str, Any]]:
    return [r for r in checkpoint_server.log.read(run_id=run_id) if r["action"] == act]


@pytest.fixture()
def triage_waits(policy_dir: Path, checkpoint_server: Any) -> None:
    """Every triage model call waits for a person: a child that stays active (awaiting approval)
    without running anything, for as long as a test needs."""
    (policy_dir / "rules" / "triage-waits.yaml").write_text(
        "kind: Rule\nname: triage-model-calls-wait\neffect: approve_if\ncondition: 'true'\n"
        "actions: [model_call]\nagents: [triage]\nreason: a person reads every triage turn first\n")
    checkpoint_server.store.reload()


def test_a_pause_lands_at_the_next_step_boundary_and_is_on_the_record_first(stack, checkpoint_server, monkeypatch):
    d = stack.driver()
    real_execute = d.toolrunner.execute
    seen: dict[str, Any] = {}

    def pause_while_the_call_runs(req: Any, output: Any) -> Any:
        if req.tool == SCAN["tool"] and "run" not in seen:  # a person pauses while the scan runs
            seen["records_before"] = len(acts(checkpoint_server, req.run_id, "pause"))
            seen["run"], seen["children"] = d.pause(req.run_id, "bob", "look at the scan first")
            seen["records_after"] = len(acts(checkpoint_server, req.run_id, "pause"))
        return real_execute(req, output)

    monkeypatch.setattr(d.toolrunner, "execute", pause_while_the_call_runs)
    script = [PLAN, {"actions": [SCAN, call("get_task", task_id="task-abc123")]}, final(reported="status queued")]
    run = stack.start(d, script)
    run_id = run.run_id

    assert seen["run"].status == PAUSED and seen["children"] == []
    assert (run.status, run.code) == (PAUSED, "paused")
    assert "bob" in run.reason and "look at the scan first" in run.reason
    # the call under way finished and its receipt is kept; the next call of the turn was not decided
    assert [r["tool"] for r in d.store.receipts(run_id)] == ["create_task_from_template"]
    scan, get_task = d.store.calls(run_id, run.turn)
    assert scan["status"] == "done" and (get_task["status"], get_task["decision_id"]) == ("pending", "")
    assert run.model_attempts == 2  # the model was not asked again
    paused = [e.data for e in d.store.events(run_id) if e.kind == "run_paused"]
    assert [(p["code"], p["person"]) for p in paused] == [("paused", "bob")]
    # on the checkpoint's record, naming the person, before the pause took effect
    assert (seen["records_before"], seen["records_after"]) == (0, 1)
    [record] = acts(checkpoint_server, run_id, "pause")
    assert (record["code"], record["arguments"]["person"], record["arguments"]["note"]) == (
        "recorded", "bob", "look at the scan first")
    assert record["principal"] == "driver"

    # a paused run cannot be paused again; resumed, it picks up the undecided call and finishes
    with pytest.raises(RunStateError) as err:
        d.pause(run_id, "bob")
    assert err.value.code == "run_already_paused"
    d.resume(run_id, "bob", spawn=False)
    run = d.run_until_stopped(run_id)
    assert run.status == SUCCEEDED, (run.code, run.reason)
    assert [r["tool"] for r in d.store.receipts(run_id)] == ["create_task_from_template", "get_task"]


def test_a_pause_that_lands_during_a_check_is_not_undone_by_its_answer(stack, checkpoint_server, monkeypatch):
    """The checkpoint answers REQUIRE_APPROVAL for a call while a person pauses the run: the
    pause stands (the worker moves a run to awaiting_approval only from running), and on resume
    the run waits for that same approval."""
    d = stack.driver()
    real_check = d.checkpoint.check

    def pause_during_the_check(req: Any) -> Any:
        if req.WhichOneof("action") == "tool_call" and not d.store.approvals(status="pending"):
            d.pause(d.store.runs()[0].run_id, "bob", "wait")
        return real_check(req)

    monkeypatch.setattr(d.checkpoint, "check", pause_during_the_check)
    wide = call("create_task_from_template", template="web", target="10.20.0.0/24")  # approve_if: a range
    run = stack.start(d, [PLAN, wide, final(reported="x")])
    assert (run.status, run.code) == (PAUSED, "paused")
    [pending] = d.store.approvals(run.run_id, status="pending")
    d.resume(run.run_id, "bob", spawn=False)
    run = d.run_until_stopped(run.run_id)
    assert run.status == AWAITING_APPROVAL
    assert [a.approval_id for a in d.store.approvals(run.run_id, status="pending")] == [pending.approval_id]
    assert d.store.receipts(run.run_id) == []


def test_pausing_a_parent_pauses_its_active_child_which_resumes_with_it(stack, checkpoint_server, monkeypatch):
    d = stack.driver()
    real_execute = d.toolrunner.execute
    seen: dict[str, Any] = {}

    def pause_the_parent_while_the_child_runs_a_call(req: Any, output: Any) -> Any:
        child = d.store.run(req.run_id)
        if child.parent_run_id and "parent" not in seen:
            seen["parent"], seen["children"] = d.pause(child.parent_run_id, "bob", "hold the tree")
        return real_execute(req, output)

    monkeypatch.setattr(d.toolrunner, "execute", pause_the_parent_while_the_child_runs_a_call)
    parent_id = start_parent(d, [final(summarised="the triage child run succeeded")], TRIAGE_OK)
    [child] = d.store.children(parent_id)
    child_id = child.run_id
    until(d, child_id, lambda r: r.status == PAUSED, "paused")
    d.wait(child_id, timeout=60)  # its worker finished the call under way and stopped
    parent, child = d.store.run(parent_id), d.store.run(child_id)

    assert (parent.status, parent.code) == (PAUSED, "paused")
    assert (child.status, child.code) == (PAUSED, "parent_paused")
    assert parent_id in child.reason and "bob" in child.reason and "hold the tree" in child.reason
    assert [c.run_id for c in seen["children"]] == [child_id]
    assert [r["tool"] for r in d.store.receipts(child_id)] == ["get_task"]  # the call under way was kept
    assert child.model_attempts == 2  # stopped at the boundary: its final was not asked for
    # each pause on the record under its own run, naming the same person
    [parent_record] = acts(checkpoint_server, parent_id, "pause")
    [child_record] = acts(checkpoint_server, child_id, "pause")
    assert parent_record["arguments"]["person"] == child_record["arguments"]["person"] == "bob"
    assert child_record["arguments"]["details"] == {"parent_run_id": parent_id}
    assert child_record["parent_run_id"] == parent_id

    # the child cannot be resumed on its own while its parent's pause holds it
    with pytest.raises(RunStateError) as err:
        d.resume(child_id, "bob")
    assert err.value.code == "parent_paused"
    assert d.store.run(child_id).status == PAUSED and acts(checkpoint_server, child_id, "resume") == []

    # resuming the parent resumes the child with it, and the tree goes on to the end
    tokens = {r: d.store.run(r).run_token for r in (parent_id, child_id)}
    later = datetime.now(UTC) + timedelta(minutes=1)  # the checkpoint's clock a minute on: a new lifetime
    checkpoint_server.service.clock = lambda: later
    _, resumed = d.resume_with_children(parent_id, "bob", "carry on")
    assert [c.run_id for c in resumed] == [child_id]
    # each recorded resume renewed that run's token, which the driver presents from then on
    for run_id, old in tokens.items():
        renewed = unverified_claims(d.store.run(run_id).run_token, RUN_LABEL)
        before = unverified_claims(old, RUN_LABEL)
        assert renewed is not None and before is not None
        assert renewed["run_id"] == run_id and renewed["exp"] > before["exp"]
    parent = settled(d, parent_id)
    assert parent.status == SUCCEEDED, (parent.code, parent.reason)
    assert d.store.run(child_id).status == SUCCEEDED
    [child_resume] = acts(checkpoint_server, child_id, "resume")
    assert child_resume["arguments"]["person"] == "bob"
    assert child_resume["arguments"]["details"]["parent_run_id"] == parent_id


def test_a_child_paused_for_its_own_reason_stays_paused_when_the_parent_resumes(stack, checkpoint_server):
    d = stack.driver()
    # one turn for the child: its plan, then its second model call trips the turns breaker
    parent_id = start_parent(d, [final(summarised="x")], TRIAGE_OK,
                             delegate={**DELEGATE, "arguments": {**DELEGATE["arguments"], "budget": {"turns": 1}}})
    assert settled(d, parent_id).status == AWAITING_CHILD
    [child] = d.store.children(parent_id)
    child_id = child.run_id
    d.wait(child_id, timeout=30)
    assert (d.store.run(child_id).status, d.store.run(child_id).code) == (PAUSED, "breaker_turns")

    run, cascaded = d.pause(parent_id, "bob", "a look at the tree")
    assert run.status == PAUSED and cascaded == []  # the child keeps its own reason
    assert d.store.run(child_id).code == "breaker_turns" and acts(checkpoint_server, child_id, "pause") == []

    _, resumed = d.resume_with_children(parent_id, "bob", spawn=False)
    assert resumed == []
    assert d.run_until_stopped(parent_id).status == AWAITING_CHILD  # waits for its child again
    child = d.store.run(child_id)
    assert (child.status, child.code) == (PAUSED, "breaker_turns")
    assert acts(checkpoint_server, child_id, "resume") == []
    # its own pause is the person's to lift, parent running or not
    assert d.resume(child_id, "bob", spawn=False).status == "running"


def test_a_pause_the_checkpoint_does_not_record_changes_nothing(stack, checkpoint_server, triage_waits):
    d = stack.driver()
    parent_id = start_parent(d, [final(summarised="x")], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    d.store.update_run(parent_id, run_token="wrun1.forged.token")  # the checkpoint refuses to record
    with pytest.raises(RunStateError) as err:
        d.pause(parent_id, "bob", "stop")
    assert err.value.code == "act_not_recorded" and "run_token_invalid" in err.value.message
    assert d.store.run(parent_id).status == AWAITING_CHILD
    assert d.store.run(child.run_id).status == AWAITING_APPROVAL  # the cascade did not run either
    assert "run_paused" not in kinds(d, parent_id) + kinds(d, child.run_id)
    assert [r for r in checkpoint_server.log.read() if r["action"] == "pause" and r["verdict"] == "ALLOW"] == []


def test_pausing_an_ended_run_is_refused_with_a_stable_code(stack):
    d = stack.driver()
    run = d.start_run("recon", parent_goal(), owner="alice", provider="scripted",
                      provider_options={"script": {"responses": [PLAN]}}, spawn=False)
    d.cancel(run.run_id, "alice", "not needed")
    with pytest.raises(RunStateError) as err:
        d.pause(run.run_id, "bob")
    assert err.value.code == "run_cancelled"
    assert d.store.run(run.run_id).status == "cancelled" and "run_paused" not in kinds(d, run.run_id)


def test_a_child_started_while_its_parent_is_paused_never_runs(stack, checkpoint_server, monkeypatch):
    """The parent is paused after the checkpoint allowed its delegation and before the child's
    row exists, so the cascade cannot see the child: the parent's worker holds it."""
    d = stack.driver()
    real = d._start_child

    def pause_parent_first(parent: dict[str, Any], *args: Any) -> dict[str, Any]:
        d.pause(parent.run_id, "bob", "wait")
        return real(parent, *args)

    monkeypatch.setattr(d, "_start_child", pause_parent_first)
    parent_id = start_parent(d, [final(summarised="x")], TRIAGE_OK)
    [child] = d.store.children(parent_id)
    d.wait(child.run_id, timeout=30)
    child = d.store.run(child.run_id)
    assert (child.status, child.code, child.model_attempts) == (PAUSED, "parent_paused", 0)
    assert [r["arguments"]["person"] for r in acts(checkpoint_server, child.run_id, "pause")] == ["bob"]
    _, resumed = d.resume_with_children(parent_id, "bob", spawn=False)
    assert [c.run_id for c in resumed] == [child.run_id]


def test_a_driver_stopped_mid_cascade_holds_the_children_when_it_recovers(stack, checkpoint_server, triage_waits):
    d = stack.driver()
    parent_id = start_parent(d, [final(summarised="x")], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    # the crash window: the parent's pause is recorded and stored, the cascade never ran
    d.store.hold(parent_id, "paused", "paused by bob", "bob")
    d.stop()
    again = stack.driver()
    again.recover()
    child = again.store.run(child.run_id)
    assert (child.status, child.code) == (PAUSED, "parent_paused")
    assert [r["arguments"]["person"] for r in acts(checkpoint_server, child.run_id, "pause")] == ["bob"]


# -- over gRPC, and the CLI ---------------------------------------------------------------------


@pytest.fixture()
def service(stack):
    d = stack.driver()
    running, port = create_server("127.0.0.1:0", d, {hashlib.sha256(OPERATOR_TOKEN.encode()).digest(): "bob"})
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield pb_grpc.DriverServiceStub(channel), d, f"127.0.0.1:{port}"
    channel.close()
    running.stop(0)


MD = [("authorization", f"Bearer {OPERATOR_TOKEN}")]


def test_pause_and_resume_over_grpc_name_the_person_of_the_credential(service, checkpoint_server, triage_waits):
    stub, d, _ = service
    parent_id = start_parent(d, [final(summarised="x")], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")

    with pytest.raises(grpc.RpcError) as err:  # an operator credential, as every RPC
        stub.PauseRun(pb.PauseRunRequest(run_id=parent_id))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    got = stub.PauseRun(pb.PauseRunRequest(run_id=parent_id, reason="lunch"), metadata=MD)
    assert (got.run.status, got.run.code) == (pb.RUN_STATUS_PAUSED, "paused") and "bob" in got.run.reason
    assert [(c.run_id, c.status, c.code) for c in got.paused_children] == [
        (child.run_id, pb.RUN_STATUS_PAUSED, "parent_paused")]
    for run_id in (parent_id, child.run_id):
        [record] = acts(checkpoint_server, run_id, "pause")
        assert record["arguments"]["person"] == "bob"

    for run_id, code in ((child.run_id, "parent_paused"), (parent_id, "run_already_paused")):
        method = stub.ResumeRun if code == "parent_paused" else stub.PauseRun
        req = pb.ResumeRunRequest(run_id=run_id) if code == "parent_paused" else pb.PauseRunRequest(run_id=run_id)
        with pytest.raises(grpc.RpcError) as err:
            method(req, metadata=MD)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and code in err.value.details()

    resumed = stub.ResumeRun(pb.ResumeRunRequest(run_id=parent_id), metadata=MD)
    assert [c.run_id for c in resumed.resumed_children] == [child.run_id]
    # the child goes back to the approval it was waiting for (not a second one)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for its approval again")
    assert len(d.store.approvals(child.run_id, status="pending")) == 1
    assert until(d, parent_id, lambda r: r.status == AWAITING_CHILD, "waited for its child")

    ended = d.start_run("recon", parent_goal(), owner="bob", provider="scripted",
                        provider_options={"script": {"responses": []}}, spawn=False)
    d.cancel(ended.run_id, "bob")
    with pytest.raises(grpc.RpcError) as err:
        stub.PauseRun(pb.PauseRunRequest(run_id=ended.run_id), metadata=MD)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "run_cancelled" in err.value.details()


def test_warden_pause_prints_the_run_and_each_child_it_paused(service, triage_waits, tmp_path):
    _, d, address = service
    data = tmp_path / "cli-data"
    data.mkdir()
    (data / "operator.token").write_text(OPERATOR_TOKEN)

    def warden(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "WARDEN_DRIVER": address, "WARDEN_DATA": str(data)}
        return subprocess.run([sys.executable, "-m", "warden.cli", *args], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=120)

    helped = warden("pause", "--help")
    assert helped.returncode == 0 and "--reason" in helped.stdout and "parent_paused" in helped.stdout

    parent_id = start_parent(d, [final(summarised="x")], [TRIAGE_PLAN])
    [child] = d.store.children(parent_id)
    until(d, child.run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    out = warden("pause", parent_id, "--reason", "checking the scope")
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first.startswith(parent_id) and " paused " in first
    assert "paused by bob: checking the scope" in out.stdout
    [child_line] = [line for line in rest if line.startswith("paused with it: ")]
    assert child.run_id in child_line and "parent_paused" in child_line

    again = warden("pause", parent_id)
    assert again.returncode == 1 and "run_already_paused" in again.stderr
    lone = warden("resume", child.run_id)
    assert lone.returncode == 1 and "parent_paused" in lone.stderr
    resumed = warden("resume", parent_id)
    assert resumed.returncode == 0, resumed.stderr
    assert any(line.startswith("resumed with it: " + child.run_id) for line in resumed.stdout.splitlines())
