"""SIGKILL under load: no decision a client received is missing, and the chain still verifies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.audit import DecisionReader
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc

from .conftest import REPO
from .helpers import tool_call

CLIENTS = 16


def _serve(data: Path, policies: Path, sock: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies", str(policies),
           "--address", "", "--socket", str(sock), "--reload-interval", "0"]  # fmt: skip
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_serving(sock: Path, proc: subprocess.Popen) -> grpc.Channel:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()
        if sock.exists():
            channel = grpc.insecure_channel(f"unix:{sock}")
            try:
                got = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
                if got.status == health_pb2.HealthCheckResponse.SERVING:
                    return channel
            except grpc.RpcError:
                pass
            channel.close()
        assert time.monotonic() < deadline, "checkpoint did not start"
        time.sleep(0.1)


def _warden(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "warden.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def test_sigkill_under_load_loses_no_answered_decision(tmp_path, policy_dir):
    data, sock = tmp_path / "data", tmp_path / "cp.sock"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    proc = _serve(data, policy_dir, sock)
    received: list[str] = []
    tokens: list[str] = []
    refused: list[str] = []
    verdicts: set[tuple[int, str]] = set()
    lock = threading.Lock()
    stop = threading.Event()
    try:
        channel = _wait_serving(sock, proc)
        stub = pb_grpc.CheckpointServiceStub(channel)
        version = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version

        def client(n: int) -> None:
            try:
                started = stub.StartRun(
                    pb.StartRunRequest(
                        person="alice", agent="recon", agent_version=version, mode=pb.RUN_MODE_INTERACTIVE
                    ),
                    timeout=5,
                )
            except grpc.RpcError:
                return  # the server is gone
            with lock:
                received.append(started.decision.decision_id)  # a run's start is an answered decision too
                if started.run_token:
                    tokens.append(started.run_token)
                else:
                    refused.append(started.decision.code)
            i = 0
            while not stop.is_set():
                i += 1
                tool = "get_task" if i % 3 else "cancel_task"  # allows and denies
                req = tool_call("recon", version, tool, {"task_id": f"task-{n}x{i}"})
                req.run.CopyFrom(pb.RunContext(run_token=started.run_token))
                try:
                    resp = stub.Check(req, timeout=5)
                except grpc.RpcError:
                    return  # the server is gone
                with lock:
                    received.append(resp.decision_id)
                    verdicts.add((resp.verdict, resp.code))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(received) < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        channel.close()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(received) >= 100, "too little traffic before the kill to prove anything"
    assert refused == [] and tokens, refused
    # real decisions, allows and denies alike (not refusals of an unestablished run)
    assert {(pb.VERDICT_ALLOW, "allowed"), (pb.VERDICT_DENY, "tool_not_allowed")} <= verdicts, verdicts

    # Restart on the same data folder: the chain continues from what was committed.
    proc = _serve(data, policy_dir, sock)
    try:
        channel = _wait_serving(sock, proc)
        req = tool_call("recon", version, "get_task", {"task_id": "task-after"})
        req.run.CopyFrom(pb.RunContext(run_token=tokens[0]))  # a run from before the kill goes on
        after = pb_grpc.CheckpointServiceStub(channel).Check(req, timeout=5)
        assert (after.verdict, after.code) == (pb.VERDICT_ALLOW, "allowed"), after
        received.append(after.decision_id)
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)

    verify = _warden("audit", "verify", "--data", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    logged = {r["decision_id"] for r in DecisionReader(data / "decisions.db").read()}
    missing = [d for d in received if d not in logged]
    assert missing == [], f"{len(missing)} of {len(received)} answered decisions are not in the log"


def test_sigkill_under_streamed_load_loses_no_answered_decision(tmp_path, policy_dir):
    """CheckStreams with eight requests in flight each (so the checkpoint decides several of a
    stream at once): every answer a client received is in the log after a SIGKILL and a restart,
    and each stream's answers came in the order of its requests."""
    import queue

    data, sock = tmp_path / "data", tmp_path / "cp.sock"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    proc = _serve(data, policy_dir, sock)
    received: list[str] = []
    out_of_order: list[tuple[str, str]] = []
    verdicts: set[tuple[int, str]] = set()
    lock = threading.Lock()
    stop = threading.Event()
    try:
        channel = _wait_serving(sock, proc)
        stub = pb_grpc.CheckpointServiceStub(channel)
        version = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version
        token = stub.StartRun(pb.StartRunRequest(person="alice", agent="recon", agent_version=version,
                                                 mode=pb.RUN_MODE_INTERACTIVE), timeout=5).run_token
        assert token

        def client(n: int) -> None:
            outbox: queue.SimpleQueue = queue.SimpleQueue()
            sent = 0

            def send() -> None:
                nonlocal sent
                sent += 1
                req = tool_call("recon", version, "get_task" if sent % 3 else "cancel_task",
                                {"task_id": f"task-{n}x{sent}"})
                req.run.CopyFrom(pb.RunContext(run_token=token))
                outbox.put(pb.CheckStreamRequest(correlation_id=str(sent), request=req))

            def requests():
                while (item := outbox.get()) is not None:
                    yield item

            for _ in range(8):
                send()
            expected = 1
            try:
                for answer in stub.CheckStream(requests(), timeout=60):
                    with lock:
                        received.append(answer.response.decision_id)
                        verdicts.add((answer.response.verdict, answer.response.code))
                        if answer.correlation_id != str(expected):
                            out_of_order.append((str(expected), answer.correlation_id))
                    expected += 1
                    if stop.is_set():
                        break
                    send()
            except grpc.RpcError:
                pass  # the server is gone
            finally:
                outbox.put(None)

        threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while len(received) < 1500 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join(timeout=10)
        channel.close()
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert len(received) >= 100, "too little traffic before the kill to prove anything"
    assert out_of_order == []
    assert {(pb.VERDICT_ALLOW, "allowed"), (pb.VERDICT_DENY, "tool_not_allowed")} <= verdicts, verdicts

    proc = _serve(data, policy_dir, sock)  # restart on the same folder: the chain continues
    try:
        channel = _wait_serving(sock, proc)
        req = tool_call("recon", version, "get_task", {"task_id": "task-after"})
        req.run.CopyFrom(pb.RunContext(run_token=token))
        after = pb_grpc.CheckpointServiceStub(channel).Check(req, timeout=5)
        assert (after.verdict, after.code) == (pb.VERDICT_ALLOW, "allowed"), after
        channel.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    verify = _warden("audit", "verify", "--data", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    logged = {r["decision_id"] for r in DecisionReader(data / "decisions.db").read()}
    missing = [d for d in received if d not in logged]
    assert missing == [], f"{len(missing)} of {len(received)} answered decisions are not in the log"
