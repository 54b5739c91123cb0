"""Two checkpoint replicas, each a real gRPC server on loopback with its own data folder, on one
PostgreSQL database: an approval and an act id are spent once across both, a run cancelled at one is
refused at the other within a second, and the database gone refuses (never an ALLOW) until it is
back, with no restart."""

from __future__ import annotations

import shutil
import threading
import time

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.server.ended_runs_feed import MAX_AGE
from checkpoint.server.stores import store_url
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.grants import SigningKey
from warden.store.errors import StoreSchemaMismatch
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store_cli import schemas
from warden.token_keys import FOLDER as TOKEN_KEYS_FOLDER

from .test_approvals import approve, approved_call, asked
from .test_run_ends import act, assert_ended, call, started


@pytest.fixture
def fleet(start, pg_url, tmp_path):
    """Replicas A and B: one grant key, one set of token keys, one database; a data folder each."""
    with Database(store_url(pg_url, tmp_path), name="test", max_size=1) as db:
        for schema in schemas():  # as `warden store migrate` does
            migrate(db, schema)
    key = SigningKey.generate()
    a = start(key=key, store=pg_url, watch_interval=None)
    shutil.copytree(a.data / TOKEN_KEYS_FOLDER, tmp_path / "data-b" / TOKEN_KEYS_FOLDER)
    b = start(key=key, store=pg_url, watch_interval=None, data_dir=tmp_path / "data-b")
    return a, b


# what a replica answers while the database is gone: the decision cannot be recorded, or (the log
# back first) the ended runs cannot be vouched for
# what a replica answers while its database is gone or coming back: each refuses, none allows. A replica
# whose catalog feed has not caught up after the return cannot tell whether its catalog is current.
FAIL_CLOSED = ("audit_unavailable", "run_state_unavailable", "catalog_unavailable", "store_unavailable")


def _at_once(*calls):
    """Run each call on its own thread, released together; their answers in order."""
    barrier = threading.Barrier(len(calls))
    answers: list = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers


def test_one_approval_sent_to_both_replicas_at_once_allows_once(fleet):
    a, b = fleet
    for _ in range(5):
        run, asked_id = asked(a)
        token = approve(a, run, asked_id).approval_token
        assert token
        request = approved_call(run, asked_id, token)
        answers = _at_once(*(lambda r=r, q=request: r.stub().Check(q, timeout=10) for r in (a, b, a, b)))
        allowed = [x for x in answers if x.verdict == pb.VERDICT_ALLOW]
        assert len(allowed) == 1, [(x.verdict, x.code, x.reason) for x in answers]
        assert allowed[0].HasField("grant")
        for refused in (x for x in answers if x.verdict != pb.VERDICT_ALLOW):
            assert (refused.verdict, refused.code) == (pb.VERDICT_DENY, "approval_invalid")
            assert "already approved and used" in refused.reason and not refused.HasField("grant")


def test_an_act_id_taken_at_one_replica_is_not_recorded_again_at_the_other(fleet):
    a, b = fleet
    run = started(a)
    request = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="pause", person="alice",
                                  act_id="pause-1")
    first = a.stub().RecordAct(request, timeout=5).decision
    assert first.code == "recorded"
    again = b.stub().RecordAct(request, timeout=5).decision
    assert again.decision_id == first.decision_id and "already recorded" in again.reason
    # on the record once: the replicas share one decision log, so B's records are A's too
    assert len([r for r in b.records() if r["action"] == "pause"]) == 1


def test_a_run_cancelled_at_one_replica_is_refused_at_the_other_within_a_second(fleet):
    a, b = fleet
    run = started(a)
    assert b.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    assert act(a, run.run_token, "cancel").code == "recorded"
    answered = time.monotonic()
    while (answer := b.stub().Check(call(run.run_token), timeout=5)).verdict == pb.VERDICT_ALLOW:
        assert time.monotonic() - answered < MAX_AGE, "replica B still allows a run cancelled at A"
    assert_ended(answer)
    assert "cancelled by alice" in answer.reason
    # and its children, delegated at B, with it
    assert_ended(b.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                                                delegation=pb.Delegation(agent="triage")), timeout=5))


def _health(running) -> int:
    return health_pb2_grpc.HealthStub(running.uds()).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_the_database_gone_refuses_and_its_return_serves_without_a_restart(fleet, pg_server):
    a, b = fleet
    run = started(a)
    for replica in (a, b):
        assert replica.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    pg_server.stop()
    try:
        stopped = time.monotonic()
        answers = []
        while time.monotonic() - stopped < MAX_AGE + 1.0:
            for replica in (a, b):
                sent = time.monotonic()
                answers.append((sent - stopped, replica.stub().Check(call(run.run_token), timeout=10)))
        late = [x for at, x in answers if at > MAX_AGE + 0.05]
        # the decision log lives in the same database: a decision that cannot be recorded is refused
        # audit_unavailable before anything else is asked of it (docs/fleet.md, "One decision log")
        assert late and all((x.verdict, x.code) == (pb.VERDICT_DENY, "audit_unavailable") for x in late), \
            {(x.verdict, x.code) for x in late}
        assert not any(x.HasField("grant") for x in late)
        assert act(a, run.run_token, "cancel").code in FAIL_CLOSED  # an end that cannot be kept
        assert {_health(a), _health(b)} == {health_pb2.HealthCheckResponse.NOT_SERVING}
        details = a.server.health_details()
        assert details["status"] == "NOT_SERVING" and details["store"]["current"] is False
        assert "***" not in details["store"]["url"] and details["store"]["url"].startswith("postgresql://")
    finally:
        pg_server.start()
    deadline = time.monotonic() + 20
    for replica in (a, b):
        while (answer := replica.stub().Check(call(run.run_token), timeout=10)).verdict != pb.VERDICT_ALLOW:
            assert answer.code in FAIL_CLOSED, answer
            assert time.monotonic() < deadline, "a replica did not serve again after the database came back"
            time.sleep(0.2)
        assert _health(replica) == health_pb2.HealthCheckResponse.SERVING
        assert replica.server.health_details()["store"]["current"] is True
    # nothing was allowed without its record: every ALLOW of the run is in the fleet's log, and no
    # ALLOW was recorded while the database was gone
    allowed = [r for r in b.records() if r["run_id"] == run.run_id and r["verdict"] == "ALLOW"]
    assert len(allowed) >= 4 and {r["decision_id"] for r in allowed} >= {x.decision_id for _, x in answers
                                                                         if x.verdict == pb.VERDICT_ALLOW}


def test_a_replica_does_not_start_on_a_database_without_the_schema(start, pg_url):
    with pytest.raises(StoreSchemaMismatch, match="warden store migrate"):
        start(store=pg_url, watch_interval=None)
