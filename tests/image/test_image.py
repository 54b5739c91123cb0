"""The checkpoint image as a real container: a real Check over gRPC through the published port,
the decision in the log inside the container and in the mounted data folder, the chain intact,
and what the image must not be: root, holding an installer or a compiler, deaf to SIGTERM, or
open on TCP without a credential."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid

import grpc
import pytest
from image_harness import DRIVER_TOKEN, LABEL, ROOT, TAG, UID, docker, prepare_data

from checkpoint.audit import DecisionReader
from driver.clients import CheckpointClient
from driver.errors import DriverError
from warden import grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc


def _start(client: CheckpointClient, agent: str) -> pb.StartRunResponse:
    started = client.start_run(pb.StartRunRequest(person="alice", agent=agent, mode=pb.RUN_MODE_INTERACTIVE))
    assert started.decision.verdict == pb.VERDICT_ALLOW, started.decision
    return started


def _get_task(started: pb.StartRunResponse, task: str) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=started.run_token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": task})
    return req


def test_a_check_through_the_published_port_is_decided_and_in_the_log(container):
    client = CheckpointClient(container.address, token=DRIVER_TOKEN)
    try:
        started = _start(client, "recon")
        allowed = client.check(_get_task(started, "task-1"))
        # refunds may not call get_task: a DENY is an answer, and recorded like an ALLOW
        denied = client.check(_get_task(_start(client, "refunds"), "task-2"))
    finally:
        client.close()
    assert allowed.verdict == pb.VERDICT_ALLOW and allowed.code == "allowed", allowed
    assert denied.verdict == pb.VERDICT_DENY and denied.code == "tool_not_allowed", denied
    # the grant is signed with the key the operator mounted, for exactly this call
    grants.verify(container.key, allowed.grant, run_id=started.run_id, agent_version=started.agent.agent_version,
                  tool="get_task", arguments={"task_id": "task-1"})

    # inside the container, with the image's own command
    out = container.exec("warden", "audit", "query", "--data", "/var/lib/warden", "--run", started.run_id,
                         "--format", "jsonl").stdout
    inside = [json.loads(line) for line in out.splitlines()]
    assert [(r["action"], r["verdict"]) for r in inside] == [("start_run", "ALLOW"), ("tool_call", "ALLOW")]
    assert inside[1]["decision_id"] == allowed.decision_id and inside[1]["caller"] == "driver"
    assert container.exec("warden", "audit", "verify", "--data", "/var/lib/warden").returncode == 0

    # and in the mounted folder, read by the host's own reader
    records = {r["decision_id"]: r for r in DecisionReader(container.data / "decisions.db").read()}
    assert records[allowed.decision_id]["code"] == "allowed"
    assert records[denied.decision_id]["verdict"] == "DENY"
    assert DecisionReader(container.data / "decisions.db").verify().ok


@pytest.mark.parametrize("token", [None, "a-wrong-token-0123456789"])
def test_tcp_without_a_valid_token_is_refused_and_recorded(container, token):
    client = CheckpointClient(container.address, token=token)
    try:
        with pytest.raises(DriverError) as refused:
            client.check(_get_task(pb.StartRunResponse(run_token="x"), "task-1"))
    finally:
        client.close()
    assert refused.value.code == "unauthenticated"
    last = list(DecisionReader(container.data / "decisions.db").read())[-1]
    assert (last["code"], last["verdict"]) == ("unauthenticated", "DENY")


def test_health_is_open_and_the_process_is_not_root(container):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(container.address) as channel:  # no token: probes carry none
        assert health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
            health_pb2.HealthCheckResponse.SERVING
        # the service itself is not open on the same port
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.CheckpointServiceStub(channel).ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # every process in the container runs as the image's user; PID 1 is tini
    top = docker("top", container.name, "-o", "pid,uid,args").stdout.splitlines()[1:]
    assert top and all(line.split()[1] == str(UID) for line in top), top
    assert "tini" in top[0] and any("checkpoint serve" in line for line in top), top
    assert container.exec("id", "-u").stdout.strip() == str(UID)


def test_sigterm_stops_it_cleanly_and_the_log_stays_whole(container):
    client = CheckpointClient(container.address, token=DRIVER_TOKEN)
    try:
        decided = client.check(_get_task(_start(client, "recon"), "task-3"))
    finally:
        client.close()
    docker("stop", "--time", "30", container.name)  # SIGTERM, through tini, to warden
    state = container.state()
    # 0: warden handled SIGTERM and exited on its own (137 would be Docker's SIGKILL after 30 s)
    assert state["ExitCode"] == 0, state
    reader = DecisionReader(container.data / "decisions.db")
    assert any(r["decision_id"] == decided.decision_id for r in reader.read())
    assert reader.verify().ok


def test_the_runtime_has_no_installer_compiler_or_package_manager(image):
    probe = ("for t in pip pip3 gcc cc make apt apt-get; do command -v $t && exit 1; done; "
             "python -c 'import pip' 2>/dev/null && exit 1; "
             "ls /build /wheels 2>/dev/null && exit 1; "
             "python -c 'import warden.healthcheck, checkpoint.server, grpc'")
    done = docker("run", "--rm", "--network", "none", "--entrypoint", "/bin/sh", TAG, "-c", probe, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    config = json.loads(docker("image", "inspect", "--format", "{{json .Config}}", TAG).stdout)
    assert config["User"] == f"{UID}:{UID}"
    assert config["Healthcheck"]["Test"][1:] == ["/opt/warden/bin/python", "-m", "warden.healthcheck"]
    assert config["Entrypoint"] == ["/usr/bin/tini", "--", "warden"]


def test_auto_workers_follow_the_containers_cpu_limit_and_cpuset(image):
    # the kernel's own cgroup files in a real container: --cpus is a CPU quota (one worker per
    # whole CPU it allows, not one per CPU of the host), --cpuset-cpus the CPUs it may run on
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs to tell a limit from the whole host")
    probe = "from checkpoint.server.workers import worker_count; print(worker_count('auto'))"

    def ask(*limits: str) -> str:
        return docker("run", "--rm", "--network", "none", "--label", LABEL, *limits, "--entrypoint",
                      "/opt/warden/bin/python", TAG, "-c", probe).stdout.strip()

    assert ask("--cpus", "1") == "1"
    assert ask("--cpus", "1.5") == "2"
    assert ask("--cpuset-cpus", "1") == "1"
    assert ask() == str(os.cpu_count())


def test_a_checkpoint_without_a_loaded_policy_set_is_reported_unhealthy(image, tmp_path):
    """The image's health check is no liveness ping: NOT_SERVING (no policy set loaded) makes
    the container unhealthy, so an orchestrator routes nothing to a checkpoint that can only refuse."""
    prepare_data(tmp_path / "data")
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    (policies / "agents" / "broken.yaml").write_text("kind: Agent\nname: [not, a, name\n")
    name = f"warden-image-test-{uuid.uuid4().hex[:10]}"
    docker("run", "-d", "--name", name, "--label", LABEL,
           "--volume", f"{tmp_path / 'data'}:/var/lib/warden", "--volume", f"{policies}:/etc/warden/policies:ro",
           "--health-interval", "1s", "--health-start-period", "0s", "--health-retries", "2", image)
    try:
        deadline = time.monotonic() + 60
        while True:
            state = json.loads(docker("inspect", "--format", "{{json .State}}", name).stdout)
            health = state.get("Health") or {}
            if health.get("Status") == "unhealthy" or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert state["Running"], "the checkpoint keeps running, waiting for an edit that loads"
        assert health.get("Status") == "unhealthy", health
        last = health["Log"][-1]
        assert last["ExitCode"] == 1 and "NOT_SERVING" in last["Output"], last
    finally:
        docker("rm", "-f", name, check=False)


def test_the_docs_docker_exec_commands_read_the_log_without_flags(container):
    """docs/deploy.md's `docker exec CONTAINER warden audit tail`, as written: no --data, no
    --policies. The image's WARDEN_DATA and WARDEN_POLICIES must name what its own command serves,
    or these read an empty ./.warden and ./policies under the working folder."""
    client = CheckpointClient(container.address, token=DRIVER_TOKEN)
    try:
        started = _start(client, "recon")
        allowed = client.check(_get_task(started, "task-4"))
    finally:
        client.close()
    tail = container.exec("warden", "audit", "tail", "--format", "jsonl", check=False)
    assert tail.returncode == 0, tail.stdout + tail.stderr
    shown = [json.loads(line) for line in tail.stdout.splitlines()]
    assert allowed.decision_id in {r["decision_id"] for r in shown}, shown
    # the same folder the host mounted: nothing was made under the working folder instead
    assert container.exec("ls", "-A", "/var/lib/warden/.warden", check=False).returncode != 0
    verify = container.exec("warden", "audit", "verify", check=False)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # the policy folder too: every command's --policies is the folder the image serves
    where = container.exec("warden", "config", "show", "audit", "serve", check=False)
    assert where.returncode == 0, where.stdout + where.stderr
    policies = [line.split() for line in where.stdout.splitlines() if line.strip().startswith("--policies")]
    assert policies == [["--policies", "/etc/warden/policies", "env", "WARDEN_POLICIES"]], where.stdout
    # a flag still wins over the image's environment
    elsewhere = container.exec("warden", "audit", "verify", "--data", "/tmp/nothing-here", check=False)
    assert elsewhere.returncode != 0
