"""A draining toolrunner lets a running tool finish and stores its receipt, while it answers health
NOT_SERVING and refuses a new call with server_draining. A real server, a real container."""

from __future__ import annotations

import threading
import time

import docker
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from toolrunner_harness import session_containers, start_harness, wait_for_process

from toolrunner.container import LABEL_DECISION
from toolrunner.receipts.sqlite import SqliteReceipts
from warden import grants
from warden.toolrunner.v1 import toolrunner_pb2 as pb


def test_drain_lets_a_running_tool_finish_and_refuses_new_calls(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path
) -> None:
    h = start_harness(docker_api, signing_key, tmp_path)
    receipts: list[pb.Receipt] = []
    try:
        call = h.request("long_sleeper", {"seconds": 3})
        running = threading.Thread(target=lambda: receipts.append(h.stub.Execute(call, timeout=120).receipt))
        running.start()
        wait_for_process(docker_api, f"{LABEL_DECISION}={call.grant.decision_id}", "sleep")
        stopper = threading.Thread(target=h.running.stop, kwargs={"grace": 60})
        stopper.start()
        health = health_pb2_grpc.HealthStub(h.channel)
        deadline = time.monotonic() + 30
        while health.Check(health_pb2.HealthCheckRequest(), timeout=5).status != health_pb2.HealthCheckResponse.NOT_SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(grpc.RpcError) as refused:
            h.execute("list_templates", {})
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in refused.value.details()
        assert receipts == []  # the tool still runs
        running.join(60)
        stopper.join(60)
        assert not stopper.is_alive()
    finally:
        h.channel.close()
        h.running.stop(grace=None)
    assert len(receipts) == 1 and receipts[0].exit_code == 0 and receipts[0].code != "cancelled", receipts
    state, stored = SqliteReceipts(tmp_path / "toolrunner.db").get(call.grant.decision_id)
    assert stored is not None and stored.exit_code == 0
    assert not session_containers(docker_api)
