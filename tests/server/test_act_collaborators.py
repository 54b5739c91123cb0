"""An act module works with its collaborators alone: the policies in force, the recorder and the
run state, each built from its real part (a policy folder, a SQLite decision log, a SQLite
single-use store), with no CheckpointService anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState
from checkpoint.server.metrics import Metrics
from checkpoint.server.reload import PolicyStore
from checkpoint.server.run_acts import RunActs
from checkpoint.server.runs import RunTokens
from checkpoint.server.single_use import SingleUse
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import Unavailable
from warden.token_keys import KeySet

DRIVER = "token:driver"


@pytest.fixture
def parts(tmp_path: Path, policy_dir: Path):
    store = PolicyStore(policy_dir, AgentCatalog(tmp_path / "catalog.db"))
    decisions = DecisionLog(tmp_path / "decisions.db")
    single_use = SingleUse(tmp_path / "used.db")
    in_force = PoliciesInForce(store)
    recorder = Recorder(decisions, Metrics())
    run_state = RunState(RunTokens(KeySet(None)), single_use)
    yield store, decisions, in_force, recorder, run_state
    single_use.close()
    decisions.close()


def test_run_acts_start_and_cancel_a_run_with_only_their_collaborators(parts):
    store, decisions, in_force, recorder, run_state = parts
    store.reload()
    acts = RunActs(in_force, recorder, run_state)

    started = acts.start_run(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE), DRIVER)
    assert started.decision.verdict == pb.VERDICT_ALLOW, started.decision.reason
    cancelled = acts.record_act(pb.RecordActRequest(run=pb.RunContext(run_token=started.run_token), act="cancel",
                                                    person="alice"), DRIVER)
    assert cancelled.decision.verdict == pb.VERDICT_ALLOW, cancelled.decision.reason

    records = list(decisions.read(run_id=started.run_id))
    assert [(r["action"], r["verdict"]) for r in records] == [("start_run", "ALLOW"), ("cancel", "ALLOW")]
    # the run state keeps the end: a widening act on the cancelled run is refused, on the record
    resumed = acts.record_act(pb.RecordActRequest(run=pb.RunContext(run_token=started.run_token), act="resume",
                                                  person="alice"), DRIVER)
    assert (resumed.decision.verdict, resumed.decision.code) == (pb.VERDICT_DENY, "run_ended")
    assert [r["code"] for r in decisions.read(run_id=started.run_id)][-1] == "run_ended"


def test_an_act_refuses_while_its_policies_in_force_hold_no_policy_set(parts):
    _store, decisions, in_force, recorder, run_state = parts  # never loaded
    acts = RunActs(in_force, recorder, run_state)
    with pytest.raises(Unavailable):
        acts.start_run(pb.StartRunRequest(agent="recon", person="alice"), DRIVER)
    assert list(decisions.read()) == []


def test_no_act_module_reaches_into_the_service():
    server = Path(__file__).resolve().parents[2] / "checkpoint" / "server"
    modules = sorted(server.glob("*_acts.py"))
    assert len(modules) >= 5
    for module in modules:
        text = module.read_text()
        assert "CheckpointService" not in text and "service._" not in text, module.name
