"""A person's act sent again under the same act id (its sender restarted and cannot tell whether
the first was recorded) is on the record once, and the first answer stands. The key is the run
the token establishes: another run's act with the same id is its own act."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden.checkpoint.v1 import checkpoint_pb2 as pb


def _pause(run_token: str, act_id: str, note: str = "lunch") -> pb.RecordActRequest:
    return pb.RecordActRequest(run=pb.RunContext(run_token=run_token), act="pause", person="alice", note=note,
                               act_id=act_id)


def _pauses(checkpoint, run_id: str) -> list[dict]:
    return [r for r in checkpoint.records() if r["run_id"] == run_id and r["action"] == "pause"]


def test_an_act_sent_again_with_its_id_is_recorded_once(checkpoint):
    run = checkpoint.start_run("recon")
    first = checkpoint.stub().RecordAct(_pause(run.run_token, "pause-1"), timeout=5).decision
    again = checkpoint.stub().RecordAct(_pause(run.run_token, "pause-1"), timeout=5).decision
    assert (first.verdict, first.code) == (again.verdict, again.code) == (pb.VERDICT_ALLOW, "recorded")
    assert again.decision_id == first.decision_id
    assert [r["decision_id"] for r in _pauses(checkpoint, run.run_id)] == [first.decision_id]
    # another act id is another act; no act id, every send is one
    checkpoint.stub().RecordAct(_pause(run.run_token, "pause-2"), timeout=5)
    checkpoint.stub().RecordAct(_pause(run.run_token, ""), timeout=5)
    checkpoint.stub().RecordAct(_pause(run.run_token, ""), timeout=5)
    assert len(_pauses(checkpoint, run.run_id)) == 4


def test_another_runs_act_with_the_same_id_is_its_own(checkpoint):
    one, two = checkpoint.start_run("recon"), checkpoint.start_run("recon")
    for run in (one, two):
        got = checkpoint.stub().RecordAct(_pause(run.run_token, "pause-shared"), timeout=5).decision
        assert got.code == "recorded"
        assert [r["decision_id"] for r in _pauses(checkpoint, run.run_id)] == [got.decision_id]


def test_a_refused_act_does_not_take_its_id_and_a_long_id_is_refused(checkpoint):
    run = checkpoint.start_run("recon")
    refused = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="delete", person="alice",
                                  act_id="pause-x")
    assert checkpoint.stub().RecordAct(refused, timeout=5).decision.code == "invalid_request"
    got = checkpoint.stub().RecordAct(_pause(run.run_token, "pause-x"), timeout=5).decision
    assert got.code == "recorded" and [r["decision_id"] for r in _pauses(checkpoint, run.run_id)] == [got.decision_id]
    long = checkpoint.stub().RecordAct(_pause(run.run_token, "p" * 65), timeout=5).decision
    assert (long.verdict, long.code) == (pb.VERDICT_DENY, "invalid_request")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sends=st.lists(st.sampled_from(["a", "b", "c", ""]), min_size=1, max_size=8))
def test_any_order_of_sends_records_each_act_id_once(checkpoint, sends):
    run = checkpoint.start_run("recon")
    answers: dict[str, set[str]] = {}
    for act_id in sends:
        got = checkpoint.stub().RecordAct(_pause(run.run_token, act_id), timeout=5).decision
        answers.setdefault(act_id, set()).add(got.decision_id)
    recorded = [r["decision_id"] for r in _pauses(checkpoint, run.run_id)]
    assert len(recorded) == len({a for a in sends if a}) + sends.count("")
    for act_id, ids in answers.items():
        assert len(ids) == (1 if act_id else sends.count(""))
        assert ids <= set(recorded)
