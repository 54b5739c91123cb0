"""One catalog for a fleet: two checkpoint replicas, each a real gRPC server on loopback with its
own data folder, on one PostgreSQL database. A version approved at A, or a learning promoted there,
decides at B within a second; with the notifications off the poll still brings it; with the
database gone B refuses `catalog_unavailable` rather than decide on a catalog it cannot vouch for,
and serves again by itself when the database is back."""

from __future__ import annotations

import hashlib
import shutil
import threading
import time

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from security.test_catalog_lifecycle import PEOPLE, as_, changes, live, propose, reviewed_tenant
from security.test_learnings import SCAN, call, learnings, promote, trip

from checkpoint.policy.postgresql_store import CHANGES
from checkpoint.server import AuthPolicy
from checkpoint.server.catalog_feed import MAX_AGE
from checkpoint.server.stores import store_url
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.grants import SigningKey
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store_cli import schemas
from warden.token_keys import FOLDER as TOKEN_KEYS_FOLDER

from .conftest import TOKEN

WITHIN = 1.0  # seconds: an act at one replica is in force at every other within this
# a version not pinnable at B: pending, or newer than what B has read of the catalog
WAITING = ("agent_version_not_approved", "catalog_unavailable")


@pytest.fixture
def fleet(start, policy_dir, pg_url, tmp_path):
    """Replicas A and B of a tenant that reviews changes: one grant key, one set of token keys, one
    database (migrated as `warden store migrate` does); a data folder each."""
    with Database(store_url(pg_url, tmp_path), name="test", max_size=1) as db:
        for schema in schemas():
            migrate(db, schema)
    reviewed_tenant(policy_dir)
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    key = SigningKey.generate()
    a = start(key=key, store=pg_url, watch_interval=None, auth=AuthPolicy(tokens=tokens))
    shutil.copytree(a.data / TOKEN_KEYS_FOLDER, tmp_path / "data-b" / TOKEN_KEYS_FOLDER)
    b = start(key=key, store=pg_url, watch_interval=None, auth=AuthPolicy(tokens=tokens),
              data_dir=tmp_path / "data-b")
    return a, b


def _approved_at(a) -> tuple[str, float]:
    """A new version of triage proposed and approved at A: (version, when A answered)."""
    proposal = propose(a, "erin", changes=changes(persona="You read tasks carefully."))
    assert proposal.decision.code == "proposed", proposal.decision
    version = proposal.version.version
    approved = as_(a, "carol").ReviewAgentChange(
        pb.ReviewAgentChangeRequest(agent="triage", version=version, approve=True, note="read it"), timeout=10)
    assert approved.decision.code == "catalog_changed", approved.decision
    return version, time.monotonic()


def _pins_within(replica, version: str, since: float) -> float:
    """Start runs of triage@version at `replica` until one is allowed; the seconds it took from `since`."""
    while not (started := replica.start_run("triage", version)).run_token:
        assert started.decision.code in WAITING, started.decision
        assert time.monotonic() - since < WITHIN, "the replica still refuses a version approved at the other"
        time.sleep(0.01)
    assert started.agent.agent_version == version
    return time.monotonic() - since


def test_a_version_approved_at_one_replica_decides_at_the_other_within_a_second(fleet):
    a, b = fleet
    before = live(b)
    going = b.start_run("triage")  # a run that began before the approval
    assert going.agent.agent_version == before
    proposal = propose(a, "erin", changes=changes(persona="You read tasks carefully."))
    version = proposal.version.version
    # pending: no replica lets a run pin it, not even B before it has read that the version waits
    assert a.start_run("triage", version).decision.code == "agent_version_not_approved"
    assert b.start_run("triage", version).decision.code in WAITING
    approved = as_(a, "carol").ReviewAgentChange(
        pb.ReviewAgentChangeRequest(agent="triage", version=version, approve=True, note="read it"), timeout=10)
    assert approved.decision.code == "catalog_changed", approved.decision
    _pins_within(b, version, time.monotonic())
    # and it is B's live version: a run that names none pins it
    assert live(b) == version != before
    assert b.start_run("triage").agent.agent_version == version
    # runs keep their pins: the run that began before decides with its own version at both replicas
    request = pb.CheckRequest(run=pb.RunContext(run_token=going.run_token), tool_call=pb.ToolCall(tool="get_task"))
    request.tool_call.arguments.update({"task_id": "task-1"})
    for replica in (a, b):
        kept = replica.stub().Check(request, timeout=5)
        assert (kept.verdict, kept.agent_version) == (pb.VERDICT_ALLOW, before), kept
    # the act is recorded once in the fleet's one log: B followed it, it did not make it again
    assert len([r for r in b.records(catalog=True) if r["action"] == "catalog" and r["arguments"].get("act") == "approve"]) == 1


def test_a_version_retired_at_one_replica_halts_its_runs_at_the_other_within_a_second(fleet):
    a, b = fleet
    old = live(a)
    version, _ = _approved_at(a)
    _pins_within(b, version, time.monotonic())
    run = b.start_run("triage", old)  # superseded: still pinnable until it is retired
    assert run.run_token, run.decision
    request = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), tool_call=pb.ToolCall(tool="get_task"))
    request.tool_call.arguments.update({"task_id": "task-1"})
    assert b.stub().Check(request, timeout=5).verdict == pb.VERDICT_ALLOW
    retired = as_(a, "carol").RetireAgentVersion(pb.RetireAgentVersionRequest(agent="triage", version=old,
                                                                             note="leaked"), timeout=5)
    assert retired.decision.code == "catalog_changed"
    since = time.monotonic()
    while (answer := b.stub().Check(request, timeout=5)).verdict == pb.VERDICT_ALLOW:
        assert time.monotonic() - since < WITHIN, "replica B still allows a run of a version retired at A"
    assert (answer.verdict, answer.code) == (pb.VERDICT_HALT, "agent_version_retired")


def test_two_admins_at_two_replicas_approve_one_proposal_once(fleet):
    a, b = fleet
    proposal = propose(a, "erin", changes=changes(persona="You read tasks carefully."))
    version = proposal.version.version
    answers: list[str] = []
    barrier = threading.Barrier(2)

    def approve(replica, person: str) -> None:
        barrier.wait()
        got = as_(replica, person).ReviewAgentChange(
            pb.ReviewAgentChangeRequest(agent="triage", version=version, approve=True, note="ok"), timeout=10)
        answers.append(got.decision.code)

    threads = [threading.Thread(target=approve, args=(r, p)) for r, p in ((a, "carol"), (b, "dave"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == ["catalog_changed", "not_pending"], answers
    approvals = [r for r in a.records(catalog=True)  # the fleet's one log, read at either replica
                 if r["action"] == "catalog" and r["code"] == "catalog_changed" and r["arguments"].get("act") == "approve"]
    assert len(approvals) == 1


def test_a_learning_promoted_at_one_replica_blocks_at_the_other_within_a_second(fleet):
    a, b = fleet
    trip(a)  # a breaker's HALT at A proposes a learning, in the shared store
    [learning] = learnings(b)  # read at B: one store
    run = b.start_run("recon")
    assert call(b, run, "create_task_from_template", SCAN).verdict == pb.VERDICT_ALLOW
    promoted = promote(a, learning.id, severity="error", match='tool.name == "create_task_from_template"')
    assert promoted.decision.code == "learning_changed", promoted.decision
    since = time.monotonic()
    while (answer := call(b, run, "create_task_from_template", SCAN)).verdict == pb.VERDICT_ALLOW:
        assert time.monotonic() - since < WITHIN, "replica B still allows a call a learning promoted at A blocks"
    assert (answer.verdict, answer.code, answer.rule) == (pb.VERDICT_DENY, "learning_blocked", f"learning:{learning.id}")
    assert not answer.HasField("grant")


def test_a_template_retired_at_one_replica_is_served_by_neither_within_a_second(fleet):
    a, b = fleet
    run = b.start_run("recon")
    served = call(b, run, "create_task_from_template", SCAN)
    assert (served.verdict, served.code) == (pb.VERDICT_ALLOW, "allowed")
    retired = as_(a, "carol").RetireCatalogEntry(pb.RetireCatalogEntryRequest(
        kind="template", tenant="acme", name="web-basic", version=served.arguments["spec"]["version"],
        note="hangs the lab"), timeout=5)
    assert retired.decision.code == "catalog_changed", retired.decision
    since = time.monotonic()
    while (answer := call(b, run, "create_task_from_template", SCAN)).verdict == pb.VERDICT_ALLOW:
        assert time.monotonic() - since < WITHIN, "replica B still serves a template retired at A"
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "unknown_template")
    assert not answer.HasField("grant")


def test_with_the_notifications_off_the_poll_still_brings_an_act(fleet, pg_url):
    a, b = fleet
    with psycopg.connect(pg_url, autocommit=True) as conn:  # the trigger that notifies, disabled
        conn.execute(f"ALTER TABLE {CHANGES} DISABLE TRIGGER {CHANGES}_notify")
    version, approved = _approved_at(a)
    took = _pins_within(b, version, approved)
    assert took < WITHIN


def test_a_replica_that_cannot_read_the_catalog_in_time_refuses_its_checks(fleet, pg_url):
    """The database up but the counters held (a slow database): B cannot tell within a second
    whether its catalog is current, so its Checks are refused catalog_unavailable, never allowed."""
    a, b = fleet
    run = b.start_run("triage")
    request = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), tool_call=pb.ToolCall(tool="get_task"))
    request.tool_call.arguments.update({"task_id": "task-1"})
    assert b.stub().Check(request, timeout=5).verdict == pb.VERDICT_ALLOW
    with psycopg.connect(pg_url) as conn:  # a transaction that holds the counters from every reader
        conn.execute(f"LOCK TABLE {CHANGES} IN ACCESS EXCLUSIVE MODE")
        held = time.monotonic()
        time.sleep(MAX_AGE + 0.5)
        answers = [b.stub().Check(request, timeout=10) for _ in range(2)]
        assert time.monotonic() - held < 4.0, "the counters were let go before the checks were made"
        conn.rollback()
    assert all((x.verdict, x.code) == (pb.VERDICT_DENY, "catalog_unavailable") for x in answers), \
        [(x.verdict, x.code) for x in answers]
    assert not any(x.HasField("grant") for x in answers)
    recorded = {r["decision_id"]: r for r in b.records() if r["code"] == "catalog_unavailable"}
    assert all(recorded[x.decision_id]["verdict"] == "DENY" for x in answers)  # each refusal on the record
    deadline = time.monotonic() + 10
    while (answer := b.stub().Check(request, timeout=10)).verdict != pb.VERDICT_ALLOW:
        assert answer.code == "catalog_unavailable" and time.monotonic() < deadline, answer
        time.sleep(0.05)


def _health(running) -> int:
    return health_pb2_grpc.HealthStub(running.uds()).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_the_database_gone_refuses_catalog_unavailable_and_its_return_serves_without_a_restart(fleet, pg_server):
    a, b = fleet
    assert b.start_run("triage").run_token
    pg_server.stop()
    try:
        stopped = time.monotonic()
        answers = []
        # a refusal may itself wait for the log (in the same database) to give up: send until two
        # were sent after the catalog's memory expired, however long each takes
        while len([at for at, _x in answers if at > MAX_AGE + 0.05]) < 2:
            assert time.monotonic() - stopped < 60
            sent = time.monotonic()
            started = b.start_run("triage")
            assert not started.run_token, started.decision
            answers.append((sent - stopped, started.decision))
        late = [x for at, x in answers if at > MAX_AGE + 0.05]
        # the catalog cannot be vouched for, and the decision log being in the same database, the
        # refusal may come first from the log: never a run, never an answer without its record
        assert all(x.verdict == pb.VERDICT_DENY and x.code in ("catalog_unavailable", "audit_unavailable")
                   for x in late), {(x.verdict, x.code) for x in late}
        assert _health(b) == health_pb2.HealthCheckResponse.NOT_SERVING
        assert b.server.health_details()["store"]["current"] is False
        # an act cannot be checked nor written: refused with the store's code, on the record
        refused_act = propose(a, "erin", changes=changes(persona="You read tasks carefully."))
        assert refused_act.decision.verdict == pb.VERDICT_DENY
        assert refused_act.decision.code in ("store_unavailable", "audit_unavailable")
        # and a read of it is UNAVAILABLE, with the store's code
        with pytest.raises(grpc.RpcError) as unread:
            learnings(b)
        assert unread.value.code() == grpc.StatusCode.UNAVAILABLE and "store" in unread.value.details()
    finally:
        pg_server.start()
    deadline = time.monotonic() + 20
    while not (started := b.start_run("triage")).run_token:
        assert started.decision.code == "catalog_unavailable", started.decision
        assert time.monotonic() < deadline, "replica B did not serve again after the database came back"
        time.sleep(0.2)
    while _health(b) != health_pb2.HealthCheckResponse.SERVING:
        assert time.monotonic() < deadline, "replica B's health did not come back"
        time.sleep(0.1)
    # B follows A's acts again (a catalog_unavailable refusal with the log still up is on the record:
    # test_a_replica_that_cannot_read_the_catalog_in_time_refuses_its_checks)
    version, approved = _approved_at(a)
    _pins_within(b, version, approved)
