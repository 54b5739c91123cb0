"""Checkpoint replicas writing one decision log on a real PostgreSQL (tests/pgserver.py).

Two servers, each with its own data folder and keys, answer Checks at once; every answer has its
record in the one table, and `warden audit verify --store` walks a single whole chain over both.
With the database gone, a Check is refused `audit_unavailable` (never an ALLOW without its record)
and health says NOT_SERVING; when it is back, service resumes by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.audit.pg_reader import PgDecisionReader
from warden import store_cli
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

from .conftest import PERSON_TOKEN
from .helpers import tool_call

REPO = Path(__file__).resolve().parents[2]
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def store(pg_url: str, tmp_path: Path):
    url = parse_store_url(pg_url, default_folder=tmp_path)
    with Database(url, name="test").open() as db:
        for schema in store_cli.schemas():  # what `warden store migrate` does: every store's tables
            migrate(db, schema)
    return url


def _checker(replica):
    stub = replica.stub()
    version = replica.version("recon")
    token = replica.start_run("recon", version).run_token

    def check(n: int) -> pb.CheckResponse:
        request = tool_call("recon", version, "get_task", {"task_id": f"task-{n}"})
        request.run.CopyFrom(pb.RunContext(run_token=token))
        return stub.Check(request, timeout=30)

    return check


def _records(store) -> list[dict]:
    with Database(store, name="test").open() as db:
        return list(PgDecisionReader(db).read())


def test_two_checkpoints_write_one_chain_that_audit_verify_passes(start, store, pg_url, tmp_path):
    replicas = [start(store=store), start(store=store)]
    checkers = [_checker(r) for r in replicas]
    answers: list[pb.CheckResponse] = []
    lock = threading.Lock()

    def load(check, first: int) -> None:
        for n in range(first, first + 20):
            answer = check(n)
            with lock:
                answers.append(answer)

    threads = [threading.Thread(target=load, args=(checkers[i % 2], 100 * i)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(answers) == 80 and {a.verdict for a in answers} == {pb.VERDICT_ALLOW}
    records = _records(store)
    assert {a.decision_id for a in answers} <= {r["decision_id"] for r in records}
    # both replicas' records, in one seq order
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert len({r["policy_revision"] for r in records if r["action"] == "tool_call"}) == 1
    # per-version statistics are one fold over the fleet's log: either replica counts both runs
    for replica in replicas:
        stats = replica.stub().AgentStats(pb.AgentStatsRequest(agent="recon"), timeout=10)
        live = [v for v in stats.versions if v.version == replica.version("recon")]
        assert [v.runs for v in live] == [2] and stats.log_seq == len(records)
    for replica in replicas:
        replica.server.stop(grace=0.5)
    verified = subprocess.run(
        [sys.executable, "-m", "warden.cli", "audit", "verify", "--store", pg_url, "--data", str(replicas[0].data)],
        capture_output=True, text=True, timeout=120, cwd=REPO, env=os.environ | {"PYTHONPATH": str(REPO)})
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"ok: {len(records)} records")
    # the replica signed the fleet's head on its way out: verify checked it as an anchor
    assert "signed anchor(s) hold" in verified.stdout


def test_the_database_gone_refuses_checks_on_the_record_and_service_comes_back_by_itself(start, store, pg_server):
    replica = start(store=store)
    health = health_pb2_grpc.HealthStub(replica.tcp())
    check = _checker(replica)
    assert check(0).verdict == pb.VERDICT_ALLOW
    watch = health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=120)
    assert next(watch).status == SERVING
    pg_server.stop()
    try:
        refused = check(1)
        assert (refused.verdict, refused.code) == (pb.VERDICT_DENY, "audit_unavailable")
        assert not refused.grant.signature if refused.HasField("grant") else True
        assert next(watch).status == NOT_SERVING
        again = check(2)
        assert (again.verdict, again.code) == (pb.VERDICT_DENY, "audit_unavailable")
    finally:
        pg_server.start()
    while next(watch).status != SERVING:  # no call sent: the replica found the database again by itself
        pass
    back = check(3)
    assert (back.verdict, back.code) == (pb.VERDICT_ALLOW, "allowed")
    records = _records(store)
    ids = {r["decision_id"] for r in records}
    assert back.decision_id in ids and refused.decision_id not in ids and again.decision_id not in ids
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    watch.cancel()


def test_checkpoint_serve_with_the_store_setting_writes_its_log_to_postgresql(tmp_path, policy_dir, pg_url):
    from .test_crash import _wait_serving, _warden

    data, sock = tmp_path / "data", tmp_path / "cp.sock"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    command = [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies",
               str(policy_dir), "--address", "", "--socket", str(sock), "--reload-interval", "0"]
    # no schema yet: the start stops with one line saying what to run, before anything listens
    unmigrated = subprocess.run([*command, "--store", pg_url], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert unmigrated.returncode == 2 and "warden store migrate" in unmigrated.stderr, unmigrated.stderr
    assert "Traceback" not in unmigrated.stderr and not sock.exists()
    migrated = _warden("store", "migrate", "--store", pg_url)
    assert migrated.returncode == 0 and "decisions" in migrated.stdout, migrated.stderr

    # the setting from the environment, as on a node whose settings name the store
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env=os.environ | {"WARDEN_STORE": pg_url})
    try:
        channel = _wait_serving(sock, proc)
        stub = pb_grpc.CheckpointServiceStub(channel)
        version = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version
        started = stub.StartRun(pb.StartRunRequest(person="alice", agent="recon", agent_version=version,
                                                   mode=pb.RUN_MODE_INTERACTIVE), timeout=5)
        request = tool_call("recon", version, "get_task", {"task_id": "task-1"})
        request.run.CopyFrom(pb.RunContext(run_token=started.run_token))
        answer = stub.Check(request, timeout=10)
        assert answer.verdict == pb.VERDICT_ALLOW
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert not (data / "decisions.db").exists()  # the log is the database's, not the data folder's
    store = parse_store_url(pg_url, default_folder=tmp_path)
    assert answer.decision_id in {r["decision_id"] for r in _records(store)}
    verified = _warden("audit", "verify", "--store", pg_url, "--data", str(data))
    assert verified.returncode == 0 and "signed anchor(s) hold" in verified.stdout, verified.stderr
    # the replica's signed heads and key, to keep elsewhere, though its folder holds no log file
    anchors, pubkey = tmp_path / "anchors.jsonl", tmp_path / "heads.pem"
    assert _warden("audit", "anchors", "--store", pg_url, "--data", str(data), "-o", str(anchors)).returncode == 0
    shown = _warden("audit", "pubkey", "--store", pg_url, "--data", str(data))
    assert shown.returncode == 0 and shown.stdout.startswith("-----BEGIN PUBLIC KEY-----"), shown.stderr
    pubkey.write_text(shown.stdout)
    own = _warden("audit", "verify", "--store", pg_url, "--anchors", str(anchors), "--pubkey", str(pubkey))
    assert own.returncode == 0 and "signed anchor(s) hold" in own.stdout, own.stderr


def test_a_decision_made_at_one_replica_reaches_a_watchdecisions_stream_at_the_other(start, store):
    a, b = start(store=store), start(store=store)
    version = a.version("recon")
    run = a.start_run("recon", version)
    # an auditor's stream (the `people` principal may read the log) at replica B
    stream = b.stub(PERSON_TOKEN).WatchDecisions(pb.WatchDecisionsRequest(run_id=run.run_id), timeout=30)
    seen: list[pb.DecisionRecord] = []

    def watch() -> None:
        for item in stream:
            seen.append(item.record)
            if item.record.action == "tool_call":
                return

    watcher = threading.Thread(target=watch)
    watcher.start()
    request = tool_call("recon", version, "get_task", {"task_id": "task-1"})
    request.run.CopyFrom(pb.RunContext(run_token=run.run_token))
    answer = a.stub().Check(request, timeout=10)
    watcher.join(timeout=20)
    stream.cancel()
    assert not watcher.is_alive(), "replica B's stream never saw the decision made at A"
    assert [r.decision_id for r in seen] == [run.decision.decision_id, answer.decision_id]


@pytest.mark.timeout(240)
def test_serve_workers_on_postgresql_write_one_chain_whose_last_head_the_supervisor_signs(tmp_path, policy_dir,
                                                                                         pg_url, store):
    from checkpoint.audit.heads import heads_path, read_heads

    from .test_crash import _warden
    from .test_workers import Cluster, Load

    cluster = Cluster(tmp_path, policy_dir, extra=("--store", pg_url))
    try:
        version = cluster.wait_serving()
        with Load(cluster, version) as load:
            load.wait_for(200)
        assert load.errors == 0
    finally:
        code = cluster.stop()
    assert code == 0, cluster.proc.stderr.read().decode() if cluster.proc.stderr else ""
    records = _records(store)
    assert set(load.received) <= {r["decision_id"] for r in records}
    # signed after both workers stopped: the head of the table the workers wrote
    heads = read_heads(heads_path(cluster.data / "decisions.db"))
    assert heads and (heads[-1].seq, heads[-1].hash) == (records[-1]["seq"], records[-1]["hash"])
    verified = _warden("audit", "verify", "--store", pg_url, "--data", str(cluster.data))
    assert verified.returncode == 0 and "signed anchor(s) hold" in verified.stdout, verified.stderr
