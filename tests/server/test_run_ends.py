"""A run that ended, or that a person cancelled, acts no more: its token is refused `run_ended` by
the checkpoint itself, whatever the driver does. The end lives in the shared store, so every worker
on the data folder refuses it from the answer on."""

from __future__ import annotations

import hashlib

import pytest
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.grants import SigningKey

from .conftest import TOKEN


def call(token: str) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-1"})
    return req


def act(running, token: str, name: str, *, status: str = "", person: str = "alice") -> pb.CheckResponse:
    request = pb.RecordActRequest(run=pb.RunContext(run_token=token), act=name, person=person)
    if name == "end":
        request.person = ""
        details = struct_pb2.Struct()
        details.update({"status": status, "code": status, "tokens": 0, "turns": 1})
        request.details.CopyFrom(details)
    return running.stub().RecordAct(request, timeout=5).decision


def started(running, agent: str = "recon") -> pb.StartRunResponse:
    got = running.start_run(agent)
    assert got.run_token, got.decision
    return got


def assert_ended(answer: pb.CheckResponse) -> None:
    assert (answer.verdict, answer.code, answer.rule) == (pb.VERDICT_DENY, "run_ended", "run_token"), answer
    assert not answer.HasField("grant")


def test_a_cancelled_run_is_refused_and_the_refusal_is_recorded(checkpoint):
    run = started(checkpoint)
    assert checkpoint.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    assert act(checkpoint, run.run_token, "cancel").code == "recorded"
    answer = checkpoint.stub().Check(call(run.run_token), timeout=5)
    assert_ended(answer)
    assert "cancel" in answer.reason
    record = checkpoint.records()[-1]
    assert (record["run_id"], record["code"], record["verdict"]) == (run.run_id, "run_ended", "DENY")


@pytest.mark.parametrize("status", ["succeeded", "failed", "cancelled"])
def test_a_run_whose_end_was_recorded_is_refused(checkpoint, status):
    run = started(checkpoint)
    assert act(checkpoint, run.run_token, "end", status=status).code == "recorded"
    assert_ended(checkpoint.stub().Check(call(run.run_token), timeout=5))
    # a plan, a delegation, a model call: every action of the run
    plan = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                           plan=pb.Plan(steps=[pb.PlanStep(id="s1", tool="get_task")]))
    assert_ended(checkpoint.stub().Check(plan, timeout=5))
    delegation = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), delegation=pb.Delegation(agent="triage"))
    got = checkpoint.stub().Check(delegation, timeout=5)
    assert_ended(got)
    assert not got.child_run_token
    # a correcting end is still recorded (the last end is the run's outcome), and revives nothing
    assert act(checkpoint, run.run_token, "end", status="paused").code == "recorded"
    assert_ended(checkpoint.stub().Check(call(run.run_token), timeout=5))


def test_a_pause_is_no_end(checkpoint):
    run = started(checkpoint)
    assert act(checkpoint, run.run_token, "end", status="paused").code == "recorded"
    assert act(checkpoint, run.run_token, "pause").code == "recorded"
    assert act(checkpoint, run.run_token, "resume").code == "recorded"
    assert checkpoint.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW


def test_an_ended_run_is_not_resumed_nor_amended_but_a_cancel_is_still_recorded(checkpoint):
    run = started(checkpoint)
    assert act(checkpoint, run.run_token, "cancel").code == "recorded"
    for name in ("resume", "amend"):
        got = act(checkpoint, run.run_token, name)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_ended"), name
    assert act(checkpoint, run.run_token, "cancel").code == "recorded"
    assert act(checkpoint, run.run_token, "pause").code == "recorded"


def test_the_children_of_a_cancelled_run_are_refused_too(checkpoint):
    parent = started(checkpoint)
    child = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token),
                                                    delegation=pb.Delegation(agent="triage")), timeout=5)
    assert child.child_run_token, child
    assert checkpoint.stub().Check(call(child.child_run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    # the driver cancels each child too; a driver that does not changes nothing at the checkpoint
    assert act(checkpoint, parent.run_token, "cancel").code == "recorded"
    answer = checkpoint.stub().Check(call(child.child_run_token), timeout=5)
    assert_ended(answer)
    assert parent.run_id in answer.reason
    # and a child's own end leaves its parent alone
    other = started(checkpoint)
    second = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=other.run_token),
                                                     delegation=pb.Delegation(agent="triage")), timeout=5)
    assert act(checkpoint, second.child_run_token, "end", status="succeeded").code == "recorded"
    assert checkpoint.stub().Check(call(other.run_token), timeout=5).verdict == pb.VERDICT_ALLOW


def test_a_cancel_on_one_worker_is_refused_by_every_worker(start, tmp_path):
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    key = SigningKey.generate()
    data = tmp_path / "shared-data"
    a, b = (start(auth=AuthPolicy(tokens=tokens), key=key, data_dir=data, shared=True, watch_interval=None)
            for _ in range(2))
    run = started(a)
    assert b.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    assert act(a, run.run_token, "cancel").code == "recorded"
    assert_ended(b.stub().Check(call(run.run_token), timeout=5))
    assert_ended(a.stub().Check(call(run.run_token), timeout=5))


ACTS = st.lists(st.sampled_from([("pause", ""), ("resume", ""), ("cancel", ""), ("end", "paused"),
                                 ("end", "succeeded"), ("end", "failed"), ("end", "cancelled")]), max_size=5)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(acts=ACTS)
def test_any_order_of_acts_ends_the_run_exactly_when_a_cancel_or_a_final_end_came(checkpoint, acts):
    run = started(checkpoint)
    ended = False
    for name, status in acts:
        got = act(checkpoint, run.run_token, name, status=status)
        if ended and name == "resume":
            assert got.code == "run_ended"
        else:
            assert got.code == "recorded", (name, got)
        ended = ended or name == "cancel" or status in ("succeeded", "failed", "cancelled")
        answer = checkpoint.stub().Check(call(run.run_token), timeout=5)
        if ended:
            assert_ended(answer)
        else:
            assert answer.verdict == pb.VERDICT_ALLOW, (acts, answer)


def test_a_store_that_cannot_say_whether_the_run_ended_refuses_and_records_why(checkpoint):
    """Fail closed: with the ended runs unreadable (their table gone under the running checkpoint),
    no call is allowed, a cancel is not answered as recorded, and each refusal is on the record."""
    import sqlite3

    run = started(checkpoint)
    assert checkpoint.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    with sqlite3.connect(checkpoint.data / "approvals-used.db") as db:
        db.execute("DROP TABLE ended_runs")
    answer = checkpoint.stub().Check(call(run.run_token), timeout=5)
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "run_state_unavailable") and not answer.HasField("grant")
    assert act(checkpoint, run.run_token, "cancel").code == "run_state_unavailable"
    assert [r["code"] for r in checkpoint.records()[-2:]] == ["run_state_unavailable", "run_state_unavailable"]


def test_an_act_id_that_cannot_be_taken_refuses_the_act_on_the_record(checkpoint):
    """Fail closed when whether an act was already recorded cannot be read (the single-use table
    gone under a running checkpoint): refused `run_state_unavailable`, recorded, never an error
    status with no record."""
    import sqlite3

    run = started(checkpoint)
    with sqlite3.connect(checkpoint.data / "approvals-used.db") as db:
        db.execute("DROP TABLE used")
    request = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="pause", person="alice",
                                  act_id="pause-1")
    answer = checkpoint.stub().RecordAct(request, timeout=5).decision
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "run_state_unavailable")
    record = checkpoint.records()[-1]
    assert (record["decision_id"], record["code"], record["action"]) == (answer.decision_id, "run_state_unavailable",
                                                                        "pause")
