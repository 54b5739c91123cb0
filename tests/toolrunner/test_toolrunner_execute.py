"""Real containers: granted calls, refusals, replay, streaming, cancel, health, the reaper."""

from __future__ import annotations

import threading
import time
from typing import Any

import docker
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from toolrunner_harness import (
    AUTH,
    SECRETS,
    SESSION,
    Harness,
    detail_code,
    error_code,
    session_containers,
    start_harness,
    wait_for_process,
)

from toolrunner.container import LABEL, LABEL_DEADLINE, LABEL_DECISION, LABEL_RUNNER
from toolrunner.reaper import reap_once
from warden import grants
from warden.toolrunner.v1 import toolrunner_pb2 as pb


def creates(api: docker.APIClient, decision_id: str, since: float) -> int:
    """How many containers were created for this decision id since `since` (daemon events)."""
    events = api.events(
        since=int(since) - 1,
        until=int(time.time()) + 1,
        filters={"type": "container", "event": "create", "label": f"{LABEL_DECISION}={decision_id}"},
        decode=True,
    )
    return sum(1 for _ in events)


def test_a_granted_call_runs_and_returns_its_output(harness: Harness, docker_api: docker.APIClient) -> None:
    receipt = harness.execute("create_task_from_template", {"template": "nginx-restart", "target": "web-1", "node": "n1"})
    assert receipt.exit_code == 0 and receipt.code == "" and not receipt.replayed
    assert '"task_id":"task-' in receipt.output and '"target":"web-1"' in receipt.output
    assert receipt.image_id == docker_api.inspect_image("warden-tools:local")["Id"]
    assert receipt.bytes_out == len(receipt.output.encode()) and len(receipt.raw_output_sha256) == 64
    assert receipt.finished_at.ToNanoseconds() >= receipt.started_at.ToNanoseconds()
    assert not session_containers(docker_api)


def test_argv_reaches_the_tool_unsplit_and_unexpanded(harness: Harness) -> None:
    receipt = harness.execute("echo_args", {"a": "two words; $(id) `id` *", "b": "'q'"})
    assert receipt.output.splitlines() == ['{"argc":2}', "[two words; $(id) `id` *]", "[x-'q'-y]"]


@pytest.mark.parametrize(
    ("mutate", "code"),
    [
        (lambda r: r.ClearField("grant"), "grant_missing"),
        (lambda r: setattr(r.grant, "signature", b"\x00" * 32), "grant_invalid"),
        (lambda r: setattr(r.grant, "key_id", "someone-else"), "grant_invalid"),
        (lambda r: setattr(r.grant, "tool", "issue_refund"), "grant_invalid"),  # signed fields are covered
        (lambda r: setattr(r, "tool", "list_templates"), "grant_mismatch"),
        (lambda r: setattr(r, "run_id", "run-other"), "grant_mismatch"),
        (lambda r: setattr(r, "agent_version", "tester@v2"), "grant_mismatch"),
        (lambda r: r.arguments.update({"task_id": "task-other"}), "grant_mismatch"),
    ],
)
def test_each_grant_refusal_has_its_code_and_starts_nothing(
    harness: Harness, docker_api: docker.APIClient, mutate: Any, code: str
) -> None:
    since = time.time()
    request = harness.request("get_task", {"task_id": "task-abc"})
    decision_id = request.grant.decision_id
    mutate(request)
    with pytest.raises(grpc.RpcError) as info:
        harness.stub.Execute(request, timeout=30)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_code(info.value) == code and info.value.details().startswith(code + ":")
    assert harness.runner.store.get(decision_id) is None
    assert creates(docker_api, decision_id, since) == 0


def test_an_expired_grant_is_refused(harness: Harness, docker_api: docker.APIClient) -> None:
    since = time.time()
    request = harness.request("get_task", {"task_id": "task-abc"}, ttl_seconds=-1)
    with pytest.raises(grpc.RpcError) as info:
        harness.stub.Execute(request, timeout=30)
    assert error_code(info.value) == "grant_expired"
    assert creates(docker_api, request.grant.decision_id, since) == 0


@pytest.mark.parametrize(
    ("tool", "args", "code", "status"),
    [
        ("no_such_tool", {}, "unknown_tool", grpc.StatusCode.NOT_FOUND),
        ("get_task", {"task_id": 7}, "invalid_arguments", grpc.StatusCode.INVALID_ARGUMENT),
        ("absent_image", {}, "image_not_allowed", grpc.StatusCode.FAILED_PRECONDITION),
        ("needs_missing_secret", {}, "secret_unavailable", grpc.StatusCode.FAILED_PRECONDITION),
        ("gvisor", {}, "runtime_unavailable", grpc.StatusCode.FAILED_PRECONDITION),
    ],
)
def test_calls_the_runner_cannot_run_are_refused_before_anything_starts(
    harness: Harness, docker_api: docker.APIClient, tool: str, args: dict, code: str, status: grpc.StatusCode
) -> None:
    since = time.time()
    request = harness.request(tool, args)
    with pytest.raises(grpc.RpcError) as info:
        harness.stub.Execute(request, timeout=30)
    assert info.value.code() == status and error_code(info.value) == code
    assert detail_code(info.value) == code  # the standard status details carry it too
    assert creates(docker_api, request.grant.decision_id, since) == 0
    assert harness.runner.store.get(request.grant.decision_id) is None


def test_replaying_a_grant_returns_the_stored_receipt_without_a_second_container(
    harness: Harness, docker_api: docker.APIClient
) -> None:
    since = time.time()
    request = harness.request("issue_refund", {"order_id": "ord-1", "amount": 12.5, "reason": "damaged"})
    first = harness.stub.Execute(request, timeout=60).receipt
    second = harness.stub.Execute(request, timeout=60).receipt
    assert not first.replayed and second.replayed
    assert second.output == first.output and second.raw_output_sha256 == first.raw_output_sha256
    assert second.started_at == first.started_at
    fetched = harness.stub.GetReceipt(pb.GetReceiptRequest(decision_id=request.grant.decision_id), metadata=AUTH).receipt
    assert fetched.output == first.output
    assert creates(docker_api, request.grant.decision_id, since) == 1


def test_an_expired_grant_whose_call_ran_still_gets_its_receipt(harness: Harness, docker_api: docker.APIClient) -> None:
    since = time.time()
    request = harness.request("list_templates", {}, ttl_seconds=2)
    first = harness.stub.Execute(request, timeout=60).receipt
    time.sleep(2.2)
    again = harness.stub.Execute(request, timeout=60).receipt
    assert again.replayed and again.output == first.output
    assert creates(docker_api, request.grant.decision_id, since) == 1


def test_concurrent_replays_run_the_tool_once(harness: Harness, docker_api: docker.APIClient) -> None:
    since = time.time()
    request = harness.request("sleeper", {"seconds": 1})
    results: list[pb.Receipt] = []
    threads = [
        threading.Thread(target=lambda: results.append(harness.stub.Execute(request, timeout=60).receipt))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and sum(not r.replayed for r in results) == 1
    assert creates(docker_api, request.grant.decision_id, since) == 1


def test_get_receipt_of_an_unknown_decision_is_not_found(harness: Harness) -> None:
    with pytest.raises(grpc.RpcError) as info:
        harness.stub.GetReceipt(pb.GetReceiptRequest(decision_id="never"), metadata=AUTH)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND and error_code(info.value) == "receipt_not_found"


def test_a_tool_past_its_timeout_is_killed_with_its_partial_output(harness: Harness, docker_api: docker.APIClient) -> None:
    receipt = harness.execute("sleeper", {"seconds": 30})
    assert receipt.timed_out and receipt.code == "timeout"
    assert receipt.output == "started\n"  # printed before the kill; "done" never came
    assert receipt.exit_code == 137 and receipt.duration_seconds < 20
    assert not session_containers(docker_api)


def test_an_injected_secret_echoed_by_the_tool_comes_back_masked(harness: Harness) -> None:
    receipt = harness.execute("leak", {})
    secret = SECRETS["DB_PASSWORD"]
    assert receipt.output.count("[masked:secret:DB_PASSWORD]") == 4, receipt.output
    assert secret not in receipt.output and secret.encode().hex() not in receipt.output
    assert "[masked:aws_access_key_id]" in receipt.output and "[masked:bearer]" in receipt.output
    assert receipt.masked_count >= 6


def test_env_piped_through_base64_does_not_leak_the_secrets(harness: Harness) -> None:
    import base64

    from warden.scrub import base64_offset_forms

    receipt = harness.execute("env_base64", {})
    assert receipt.exit_code == 0 and receipt.output.count("\n") > 1  # wrapped like `env | base64`
    joined = receipt.output.replace("\n", "")
    for name in ("API_TOKEN", "DB_PASSWORD"):
        assert f"[masked:secret:{name}]" in receipt.output, receipt.output
        forms = base64_offset_forms(SECRETS[name].encode())
        assert not any(form in joined for form in forms), receipt.output
    # Only the secrets are masked: what comes before the first one still decodes (sorted env).
    first = receipt.output.split("[", 1)[0].replace("\n", "")
    assert base64.b64decode(first[: len(first) // 4 * 4]).startswith(b"API_TOKEN")


def test_only_the_definitions_environment_reaches_the_tool(harness: Harness) -> None:
    out = harness.execute("env", {"name": "GREETING"}).output
    assert out.startswith("value=hello\n")
    assert "DB_PASSWORD" not in out and "API_TOKEN" not in out  # not this tool's secrets
    assert "PROXY" not in out.upper()


def test_streaming_sends_scrubbed_chunks_then_the_receipt(harness: Harness) -> None:
    events = list(harness.stub.ExecuteStream(harness.request("split_secret", {}), timeout=60))
    chunks = [e.chunk for e in events if e.WhichOneof("event") == "chunk"]
    receipts = [e.receipt for e in events if e.WhichOneof("event") == "receipt"]
    assert len(receipts) == 1 and events[-1].WhichOneof("event") == "receipt"
    streamed = "".join(c.data for c in chunks)
    secret = SECRETS["API_TOKEN"]
    assert streamed == "secret is: [masked:secret:API_TOKEN] done\n"
    assert secret[: len(secret) // 2] not in receipts[0].output and receipts[0].masked_count == 1


def test_streaming_refusals_are_errors_with_codes(harness: Harness) -> None:
    request = harness.request("get_task", {"task_id": "task-abc"})
    request.ClearField("grant")
    with pytest.raises(grpc.RpcError) as info:
        list(harness.stub.ExecuteStream(request, timeout=30))
    assert error_code(info.value) == "grant_missing"


def test_the_concurrency_limit_refuses_with_runner_busy_and_cancel_stops_a_call(
    docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path
) -> None:
    h = start_harness(docker_api, signing_key, tmp_path, max_concurrency=1)
    try:
        first: list[pb.Receipt] = []
        long_call = h.request("long_sleeper", {"seconds": 50}, run_id="run-busy")
        t = threading.Thread(target=lambda: first.append(h.stub.Execute(long_call, timeout=120).receipt))
        t.start()
        # Running its sleep: the call holds the only slot and has printed "started".
        wait_for_process(docker_api, f"{LABEL_DECISION}={long_call.grant.decision_id}", "sleep")
        with pytest.raises(grpc.RpcError) as info:
            h.execute("list_templates", {})
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and error_code(info.value) == "runner_busy"
        assert h.stub.Cancel(pb.CancelRequest(run_id="run-busy"), metadata=AUTH).cancelled == 1
        t.join(60)
        assert first and first[0].code == "cancelled" and not first[0].timed_out
        assert first[0].output == "started\n"
        assert h.execute("list_templates", {}).exit_code == 0  # the slot is free again
    finally:
        h.close()
    assert not session_containers(docker_api)


def test_health_and_reflection(harness: Harness) -> None:
    health = health_pb2_grpc.HealthStub(harness.channel)
    for service in ("", "warden.toolrunner.v1.ToolRunnerService"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service)).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(harness.channel)
    answer = next(reflect.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in answer.list_services_response.service}
    assert "warden.toolrunner.v1.ToolRunnerService" in names and "grpc.health.v1.Health" in names


def _leftover(api: docker.APIClient, deadline: float) -> str:
    created = api.create_container(
        "warden-tools:local",
        command=["sleep", "300"],
        labels={LABEL: "1", LABEL_DEADLINE: f"{deadline:.3f}", LABEL_RUNNER: f"{SESSION}-crashed"},
        host_config=api.create_host_config(network_mode="none", init=True),
    )
    api.start(created["Id"])
    return created["Id"]


class _OnlyThese:
    """The daemon narrowed to the given containers for reap_once: with a clock moved forward it
    would otherwise reap the live calls of every runner on this daemon."""

    def __init__(self, api: docker.APIClient, ids: set[str]):
        self._api, self._ids = api, ids

    def containers(self, **kw: Any) -> list[dict]:
        return [c for c in self._api.containers(**kw) if c["Id"] in self._ids]

    def remove_container(self, *args: Any, **kw: Any) -> None:
        self._api.remove_container(*args, **kw)


def test_the_reaper_removes_leftovers_past_their_deadline_only(docker_api: docker.APIClient) -> None:
    # Both deadlines lie ahead of the real clock, so the reapers of live runners (this module's
    # harness reaps every 30 s) leave them alone; reap_once is asked about a later moment that
    # one deadline precedes and the other follows.
    now = time.time()
    overdue = _leftover(docker_api, now + 3600)
    live = _leftover(docker_api, now + 3 * 3600)
    try:
        removed = reap_once(_OnlyThese(docker_api, {overdue, live}), now=now + 2 * 3600)
        assert overdue in removed and live not in removed
        ids = {c["Id"] for c in session_containers(docker_api)}
        assert overdue not in ids and live in ids
    finally:
        for cid in (overdue, live):
            try:
                docker_api.remove_container(cid, force=True)
            except docker.errors.NotFound:
                pass


def test_a_starting_runner_reaps_leftovers(docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path) -> None:
    overdue = _leftover(docker_api, time.time() - 1)
    h = start_harness(docker_api, signing_key, tmp_path)
    try:
        # Gone at once, unless another runner on the daemon (another test session's reaper) was
        # removing it at that moment: then this one's removal answers 409 and the container goes
        # a moment later. Wait for the state, bounded well below the 30 s of any periodic reaper,
        # so only a reap at start (this one's, or a racing one's) can pass this.
        deadline = time.monotonic() + 5
        while overdue in {c["Id"] for c in session_containers(docker_api)}:
            assert time.monotonic() < deadline, "the starting runner did not reap the leftover"
            time.sleep(0.05)
    finally:
        h.close()
