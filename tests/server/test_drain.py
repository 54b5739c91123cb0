"""SIGTERM drains a real checkpoint process: health goes NOT_SERVING, a new call is refused, the calls
in flight finish and are recorded, then the log closes and verifies.

Calls are held in flight by holding the decision log's SQLite write lock from this test: the
checkpoint's appends wait on it (busy timeout), exactly as under a slow disk."""

from __future__ import annotations

import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.audit import DecisionReader
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.drain import DRAINING_CODE

from .conftest import REPO
from .helpers import tool_call
from .test_crash import _wait_serving, _warden


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def health(channel: grpc.Channel) -> int:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_sigterm_lets_calls_in_flight_finish_and_refuses_new_ones(tmp_path, policy_dir):
    data, sock, metrics_port = tmp_path / "data", tmp_path / "cp.sock", free_port()
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies",
         str(policy_dir), "--address", "", "--socket", str(sock), "--reload-interval", "0", "--head-interval", "0",
         "--metrics-address", f"127.0.0.1:{metrics_port}", "--grace", "60"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lock = None
    try:
        channel = _wait_serving(sock, proc)
        stub = pb_grpc.CheckpointServiceStub(channel)
        version = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version
        started = stub.StartRun(pb.StartRunRequest(person="alice", agent="recon", agent_version=version,
                                                   mode=pb.RUN_MODE_INTERACTIVE), timeout=5)

        def check(n: int) -> pb.CheckRequest:
            req = tool_call("recon", version, "get_task", {"task_id": f"task-{n}"})
            req.run.CopyFrom(pb.RunContext(run_token=started.run_token))
            return req

        lock = sqlite3.connect(data / "decisions.db", isolation_level=None, timeout=10)
        lock.execute("BEGIN IMMEDIATE")  # every append now waits
        held = [stub.Check.future(check(n), timeout=60) for n in range(3)]
        deadline = time.monotonic() + 30
        while scrape(metrics_port).get("warden_checkpoint_grpc_calls_in_flight") != 3:
            assert time.monotonic() < deadline, "the three calls never reached the server"
            time.sleep(0.05)

        # the health stream tells each change as it happens: waiting on it waits for the event
        changes = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest(), timeout=120)
        assert next(changes).status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert next(changes).status == health_pb2.HealthCheckResponse.NOT_SERVING, "health never went NOT_SERVING"
        changes.cancel()
        try:
            stub.Check(check(99), timeout=10)
            raise AssertionError("a call after SIGTERM was answered")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in exc.details(), exc
        assert not any(f.done() for f in held), "the calls in flight were cut off"
        assert scrape(metrics_port)["warden_checkpoint_grpc_refused_draining_total"] == 1
        assert proc.poll() is None  # still draining while a call is in flight

        lock.execute("COMMIT")  # the disk is fast again
        answers = [f.result(timeout=30) for f in held]
        assert proc.wait(timeout=30) == 0, proc.stderr.read().decode()
        channel.close()
    finally:
        if lock is not None and lock.in_transaction:
            lock.execute("ROLLBACK")
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert {(a.verdict, a.code) for a in answers} == {(pb.VERDICT_ALLOW, "allowed")}
    logged = {r["decision_id"] for r in DecisionReader(Path(data) / "decisions.db").read()}
    assert {a.decision_id for a in answers} <= logged
    verify = _warden("audit", "verify", "--data", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_gate_in_the_handlers_refuses_every_checkpoint_method_and_records_nothing(checkpoint):
    """The gate is asked inside each handler (no interceptor): once draining, a Check, another
    unary method and a WatchDecisions stream are refused with `server_draining` before any
    authentication or record, while health and reflection still answer."""
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    stub = checkpoint.stub()
    version = checkpoint.version("recon")
    started = checkpoint.start_run("recon", version)
    request = tool_call("recon", version, "get_task", {"task_id": "task-1"})
    request.run.CopyFrom(pb.RunContext(run_token=started.run_token))
    assert stub.Check(request, timeout=5).verdict == pb.VERDICT_ALLOW
    before = len(checkpoint.records(catalog=True))
    gate = checkpoint.server.gate
    assert gate.in_flight == 0  # the calls above left the count as they found it

    gate.start()
    for call in (lambda: stub.Check(request, timeout=5),
                 lambda: checkpoint.stub(token=None).Check(request, timeout=5),  # unauthenticated: not recorded either
                 lambda: stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5),
                 lambda: next(iter(stub.WatchDecisions(pb.WatchDecisionsRequest(), timeout=5)))):
        try:
            call()
            raise AssertionError("a call was answered while draining")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in exc.details(), exc
    assert gate.in_flight == 0
    assert len(checkpoint.records(catalog=True)) == before
    channel = checkpoint.tcp()
    assert health(channel) == health_pb2.HealthCheckResponse.SERVING  # this test never told health
    reflected = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    names = {s.name for s in next(iter(reflected)).list_services_response.service}
    assert "warden.checkpoint.v1.CheckpointService" in names


class _Caller:
    """A client that calls until the server tells it to go: `server_draining`, or a connection
    refused once the server has gone. Every answer's status code is kept."""

    def __init__(self, checkpoint) -> None:
        self.stub = checkpoint.stub()
        self.codes: list[tuple[str, str]] = []
        self.answered = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while True:
            try:
                self.stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=30)
                self.answered.set()
            except grpc.RpcError as exc:  # told to go elsewhere, the server gone, or cut off
                self.codes.append((exc.code().name, exc.details() or ""))
                return


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(callers=st.integers(min_value=1, max_value=8), grace=st.sampled_from([1.0, 5.0]))
def test_calls_arriving_at_the_end_of_a_drain_are_refused_never_cancelled(start, callers, grace):
    """Clients call back to back while the server drains: each call is answered, or refused with
    UNAVAILABLE (`server_draining`, or no server any more), which a retry policy retries
    elsewhere. CANCELLED, which none retries, is never an answer to a call that arrived."""
    checkpoint = start()
    clients = [_Caller(checkpoint) for _ in range(callers)]
    for client in clients:
        client.thread.start()
    for client in clients:
        assert client.answered.wait(30), "a client never got an answer"
    checkpoint.server.stop(grace=grace)
    for client in clients:
        client.thread.join(60)
        assert not client.thread.is_alive()
    ended = [code for client in clients for code in client.codes]
    assert len(ended) == callers and all(code == "UNAVAILABLE" for code, _ in ended), ended
    assert any(DRAINING_CODE in details for _, details in ended), ended
