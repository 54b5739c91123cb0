"""An act id whose first act was never recorded is never answered "already recorded".

The act id is taken in the single-use store before the act's record is written; when the record
fails, the id is given back. When giving it back fails too (the store went away at that moment),
the id stays taken by a decision id that is on no log. A resend of the act must not answer that it
was "already recorded as decision X": it is refused, on the record, with `act_id_unrecorded`.
Both backends: the SQLite files of one checkpoint, and a fleet's PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.policy.catalog import AgentCatalog
from checkpoint.server.collaborators import PoliciesInForce, Recorder, RunState
from checkpoint.server.metrics import Metrics
from checkpoint.server.reload import PolicyStore
from checkpoint.server.run_acts import RunActs
from checkpoint.server.runs import RunTokens
from checkpoint.server.stores import decision_log, open_stores, store_url
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.store.errors import StoreUnavailable
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store_cli import schemas
from warden.token_keys import KeySet

DRIVER = "token:driver"


class LogDownOnce(Recorder):
    """The log refuses the next record (a full disk, a database gone), as AuditUnavailable."""

    down = False

    def append(self, record: Any) -> int:
        if self.down:
            self.down = False
            raise AuditUnavailable("the log's disk is full")
        return super().append(record)


class StoreDownOnRelease(RunState):
    """The single-use store goes away between the claim and the give-back."""

    down = False

    def release_act(self, key: str, decision_id: str) -> None:
        if self.down:
            raise StoreUnavailable("the store went away")
        super().release_act(key, decision_id)


@pytest.fixture(params=["sqlite", "postgresql"])
def parts(request, tmp_path: Path, policy_dir: Path) -> Iterator[tuple[RunActs, Any, LogDownOnce, StoreDownOnRelease]]:
    if request.param == "sqlite":
        url = store_url(None, tmp_path)
    else:
        url = store_url(request.getfixturevalue("pg_url"), tmp_path)
        with Database(url, name="test", max_size=1) as db:
            for schema in schemas():
                migrate(db, schema)
    stores = open_stores(url, run_token_ttl=3600)
    decisions = decision_log(url, tmp_path)
    store = PolicyStore(policy_dir, AgentCatalog(tmp_path / "catalog.db"))
    store.reload()
    recorder = LogDownOnce(decisions, Metrics())
    run_state = StoreDownOnRelease(RunTokens(KeySet(None)), stores.single_use)
    yield RunActs(PoliciesInForce(store), recorder, run_state), decisions, recorder, run_state
    decisions.close()
    stores.close()


def _pause(run_token: str, act_id: str) -> pb.RecordActRequest:
    return pb.RecordActRequest(run=pb.RunContext(run_token=run_token), act="pause", person="alice", note="lunch",
                               act_id=act_id)


def test_a_resent_act_whose_id_could_not_be_given_back_is_not_answered_already_recorded(parts):
    acts, decisions, recorder, run_state = parts
    run = acts.start_run(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE), DRIVER)
    assert run.decision.verdict == pb.VERDICT_ALLOW, run.decision.reason

    recorder.down = run_state.down = True
    first = acts.record_act(_pause(run.run_token, "pause-1"), DRIVER).decision
    assert (first.verdict, first.code) == (pb.VERDICT_DENY, "audit_unavailable")
    run_state.down = False
    assert run_state.single_use.used_by(f"act:{run.run_id}:pause-1") == first.decision_id  # still taken

    again = acts.record_act(_pause(run.run_token, "pause-1"), DRIVER).decision
    recorded = {r["decision_id"] for r in decisions.read(run_id=run.run_id)}
    assert first.decision_id not in recorded
    # never an answer that points at a record that does not exist
    assert "already recorded" not in again.reason
    assert (again.verdict, again.code) == (pb.VERDICT_DENY, "act_id_unrecorded"), again.reason
    assert again.decision_id in recorded  # the refusal itself is on the record
    pauses = [r for r in decisions.read(run_id=run.run_id) if r["action"] == "pause"]
    assert [(r["verdict"], r["code"]) for r in pauses] == [("DENY", "act_id_unrecorded")]

    # the act sent with a new act id is recorded, and a resend of that one finds its record
    fresh = acts.record_act(_pause(run.run_token, "pause-2"), DRIVER).decision
    assert (fresh.verdict, fresh.code) == (pb.VERDICT_ALLOW, "recorded")
    resent = acts.record_act(_pause(run.run_token, "pause-2"), DRIVER).decision
    assert (resent.verdict, resent.code, resent.decision_id) == (pb.VERDICT_ALLOW, "recorded", fresh.decision_id)
    assert resent.reason == f"already recorded as decision {fresh.decision_id}"


def test_an_act_id_given_back_after_a_failed_record_is_taken_again(parts):
    acts, decisions, recorder, _run_state = parts
    run = acts.start_run(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE), DRIVER)
    recorder.down = True
    first = acts.record_act(_pause(run.run_token, "pause-1"), DRIVER).decision
    assert first.code == "audit_unavailable"
    again = acts.record_act(_pause(run.run_token, "pause-1"), DRIVER).decision
    assert (again.verdict, again.code) == (pb.VERDICT_ALLOW, "recorded")
    assert [r["decision_id"] for r in decisions.read(run_id=run.run_id) if r["action"] == "pause"] == [
        again.decision_id]
