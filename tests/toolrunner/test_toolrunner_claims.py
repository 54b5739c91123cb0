"""What only the claim and the container spec hold: a grant that another runner sharing the
receipts has claimed never runs again, and a tool runs as the user its definition names."""

from __future__ import annotations

import threading

import docker
import grpc
import pytest
from toolrunner_harness import AUTH, Harness, detail_code, start_harness, wait_for_process

from toolrunner.container import LABEL_DECISION
from warden import grants
from warden.toolrunner.v1 import toolrunner_pb2 as pb


def test_a_tool_runs_as_the_user_its_definition_names_not_the_images(harness: Harness) -> None:
    # The image's own user is the runner's default (65534): a spec that left the user out would
    # pass every check that only asks for "unprivileged".
    receipt = harness.execute("own_user", {})
    assert receipt.exit_code == 0, receipt.output
    assert receipt.output.strip() == "uid=4321 gid=4322"


def test_a_grant_another_runner_has_claimed_is_not_run_again(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path
) -> None:
    # Two runners on one receipts file, as two processes behind one data folder: the second
    # starts first, so its start-up (which marks claims left running as interrupted) is over.
    first = start_harness(docker_api, signing_key, tmp_path)
    second = start_harness(docker_api, signing_key, tmp_path)
    request = first.request("long_sleeper", {"seconds": 50})
    label = f"{LABEL_DECISION}={request.grant.decision_id}"
    done: list[pb.Receipt] = []
    running = threading.Thread(target=lambda: done.append(first.stub.Execute(request, timeout=120).receipt))
    running.start()
    try:
        wait_for_process(docker_api, label, "sleep")  # claimed, and its container runs
        with pytest.raises(grpc.RpcError) as refused:
            second.stub.Execute(request, timeout=120)
        assert detail_code(refused.value) == "already_started"
        assert len(docker_api.containers(all=True, filters={"label": label})) == 1
    finally:
        first.stub.Cancel(pb.CancelRequest(decision_id=request.grant.decision_id), metadata=AUTH)
        running.join(60)
        first.close()
        second.close()
    assert done and done[0].code == "cancelled"
