"""A toolrunner killed (SIGKILL) mid-call takes its container with it, and the call's receipt
says `interrupted`; a runner starting on the store of one that was cut off removes what its
calls left running. Real processes, real Docker: waits are for states, the bounds only turn a
hang into a failure (and sit well below the reaper's deadline, timeout plus 30 s)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import docker
import grpc
import pytest
from toolrunner_harness import AUTH, OPERATOR_TOKEN, SESSION, start_harness, wait_for_process

from toolrunner.container import LABEL, LABEL_DEADLINE, LABEL_DECISION, LABEL_RUNNER
from toolrunner.instance import instance_of
from toolrunner.receipts.sqlite import SqliteReceipts
from warden import grants
from warden.toolrunner.v1 import toolrunner_pb2 as pb
from warden.toolrunner.v1 import toolrunner_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("runner_process.py")
BOUND = 45.0  # seconds: far below the container's own deadline (60 s timeout + 30 s grace)


def _request(key: grants.SigningKey, tool: str, arguments: dict[str, Any]) -> pb.ExecuteRequest:
    """What toolrunner_harness.Harness.request signs, for a runner in another process."""
    grant = grants.sign(key, decision_id="d-" + uuid.uuid4().hex, run_id="run-1", agent="tester",
                        agent_version="tester@v1", tool=tool, arguments=arguments, policy_revision="rev-1")
    req = pb.ExecuteRequest(run_id="run-1", agent="tester", agent_version="tester@v1", tool=tool, grant=grant)
    req.arguments.update(arguments)
    return req


def _gone(api: docker.APIClient, label: str) -> None:
    deadline = time.monotonic() + BOUND
    while api.containers(all=True, filters={"label": label}):
        assert time.monotonic() < deadline, f"the container labelled {label} outlived its runner"
        time.sleep(0.1)


def _claimed(db: Path, decision_id: str) -> None:
    deadline = time.monotonic() + BOUND
    while True:
        try:
            with sqlite3.connect(db) as conn:
                if conn.execute("SELECT 1 FROM receipts WHERE decision_id = ?", [decision_id]).fetchone():
                    return
        except sqlite3.OperationalError:
            pass  # the runner has not made its table yet
        assert time.monotonic() < deadline, "the call was never claimed"
        time.sleep(0.02)


@pytest.mark.parametrize("point", ["claimed", "sleeping"])
def test_a_runner_killed_mid_call_takes_its_container_with_it(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path, point: str
) -> None:
    key_file = tmp_path / "grant.key"
    signing_key.save(key_file)
    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WARDEN_TEST_OPERATOR_TOKEN": OPERATOR_TOKEN}
    proc = subprocess.Popen([sys.executable, str(HELPER), str(data), str(key_file), f"{SESSION}-{uuid.uuid4().hex[:6]}"],
                            stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    assert proc.stdout is not None
    port = int(proc.stdout.readline().split()[1])
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    request = _request(signing_key, "long_sleeper", {"seconds": 50})
    label = f"{LABEL_DECISION}={request.grant.decision_id}"
    errors: list[Any] = []

    def call() -> None:
        try:
            pb_grpc.ToolRunnerServiceStub(channel).Execute(request, timeout=120)
        except grpc.RpcError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    try:
        if point == "claimed":
            _claimed(data / "toolrunner.db", request.grant.decision_id)
        else:
            wait_for_process(docker_api, label, "sleep")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        caller.join(60)
        assert errors and errors[0].code() == grpc.StatusCode.UNAVAILABLE  # the runner is gone
        _gone(docker_api, label)
    finally:
        channel.close()
        if proc.poll() is None:
            proc.kill()
    again = start_harness(docker_api, signing_key, data)
    try:
        receipt = again.stub.GetReceipt(pb.GetReceiptRequest(decision_id=request.grant.decision_id),
                                        metadata=AUTH, timeout=30).receipt
        assert (receipt.code, receipt.exit_code) == ("interrupted", -1)
    finally:
        again.close()


def test_a_starting_runner_removes_what_the_calls_it_finds_cut_off_left_running(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    # The runner and its watchdog died together (a whole container killed): the store shows the
    # claim still running, and its container runs on, far from its deadline. The claim is this data
    # folder's instance's, as the killed runner's was.
    decision_id = "d-" + uuid.uuid4().hex
    store = SqliteReceipts(tmp_path / "toolrunner.db", instance=instance_of(tmp_path))
    assert store.claim(decision_id, "run-1", "long_sleeper")
    store.close()
    created = docker_api.create_container(
        "warden-tools:local", command=["sleep", "300"],
        labels={LABEL: "1", LABEL_DEADLINE: f"{time.time() + 3600:.3f}", LABEL_RUNNER: f"{SESSION}-killed",
                LABEL_DECISION: decision_id},
        host_config=docker_api.create_host_config(network_mode="none", init=True))
    docker_api.start(created["Id"])
    try:
        h = start_harness(docker_api, signing_key, tmp_path)
        try:
            assert not docker_api.containers(all=True, filters={"label": f"{LABEL_DECISION}={decision_id}"})
            receipt = h.stub.GetReceipt(pb.GetReceiptRequest(decision_id=decision_id), metadata=AUTH, timeout=30)
            assert receipt.receipt.code == "interrupted"
        finally:
            h.close()
    finally:
        try:
            docker_api.remove_container(created["Id"], force=True)
        except docker.errors.NotFound:
            pass


def test_a_runner_that_stops_takes_what_still_runs_with_it(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path: Path
) -> None:
    h = start_harness(docker_api, signing_key, tmp_path)
    request = h.request("long_sleeper", {"seconds": 50})
    label = f"{LABEL_DECISION}={request.grant.decision_id}"
    caller = threading.Thread(target=lambda: _quietly(lambda: h.stub.Execute(request, timeout=120)))
    caller.start()
    wait_for_process(docker_api, label, "sleep")
    h.close()  # no grace: the call is still running
    _gone(docker_api, label)
    caller.join(60)


def _quietly(fn: Any) -> None:
    try:
        fn()
    except grpc.RpcError:
        pass
