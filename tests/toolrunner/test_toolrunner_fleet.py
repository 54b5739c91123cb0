"""Two toolrunners on one PostgreSQL: real gRPC servers, real containers, a real database.

Both hold the same grant key, as a fleet does; what stops a grant running twice is the claim in
the shared store. Containers are counted from the Docker engine's own events, so "ran once" means
one container was created, not that one answer said so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from toolrunner_harness import ROOT, Harness, detail_code, start_harness, wait_for_process

from toolrunner.container import LABEL_DECISION
from toolrunner.receipts.postgresql import SCHEMA
from warden import grants
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import StoreUrl, parse_store_url
from warden.toolrunner.v1 import toolrunner_pb2 as pb

BOUND = 30.0  # seconds: only turns a hang into a failure
RECOVERY_BOUND = 90.0  # seconds: a pool's reconnect backoff after an outage, with room to spare
UNIQUE = "cat /proc/sys/kernel/random/uuid"  # a script whose every run prints something new


def _migrated(pg_url: str) -> StoreUrl:
    url = parse_store_url(pg_url, default_folder="/unused")
    with Database(url, name="migrate", max_size=1) as db:
        migrate(db, SCHEMA)
    return url


@pytest.fixture
def fleet(docker_api: docker.APIClient, signing_key: grants.SigningKey, pg_url: str,
          tmp_path: Path) -> Iterator[tuple[Harness, Harness]]:
    url = _migrated(pg_url)
    a = start_harness(docker_api, signing_key, tmp_path / "a", store=url)
    try:
        b = start_harness(docker_api, signing_key, tmp_path / "b", store=url)
    except BaseException:
        a.close()
        raise
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _created(api: docker.APIClient, decision_id: str, since: float) -> int:
    """Containers the engine created for this decision since `since` (its events, not our answers)."""
    events = api.events(since=int(since) - 1, until=int(time.time()) + 1, decode=True,
                        filters={"type": "container", "event": "create", "label": f"{LABEL_DECISION}={decision_id}"})
    return sum(1 for _ in events)


def _health(h: Harness) -> int:
    return health_pb2_grpc.HealthStub(h.channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def test_a_grant_replayed_at_the_other_toolrunner_does_not_run_again(fleet, docker_api) -> None:
    a, b = fleet
    since = time.time()
    request = a.request("sh_secret", {"script": UNIQUE})
    first = a.stub.Execute(request, timeout=120).receipt
    assert first.exit_code == 0 and not first.replayed, first.output
    replay = b.stub.Execute(request, timeout=120).receipt  # b holds the same key: only the store stops it
    assert replay.replayed and replay.output == first.output
    assert _created(docker_api, request.grant.decision_id, since) == 1


def test_a_grant_replayed_at_the_other_toolrunner_while_it_runs_is_refused(fleet, docker_api) -> None:
    a, b = fleet
    request = a.request("long_sleeper", {"seconds": 3})
    label = f"{LABEL_DECISION}={request.grant.decision_id}"
    done: list[pb.Receipt] = []
    running = threading.Thread(target=lambda: done.append(a.stub.Execute(request, timeout=120).receipt))
    running.start()
    try:
        wait_for_process(docker_api, label, "sleep")
        with pytest.raises(grpc.RpcError) as refused:
            b.stub.Execute(request, timeout=120)
        assert detail_code(refused.value) == "already_started"
        assert len(docker_api.containers(all=True, filters={"label": label})) == 1
    finally:
        running.join(60)
    assert done and done[0].exit_code == 0 and not done[0].replayed


def test_the_same_grant_sent_to_both_at_once_runs_once(fleet, docker_api) -> None:
    a, b = fleet
    for _ in range(3):
        since = time.time()
        request = a.request("sh_secret", {"script": f"{UNIQUE}; sleep 0.3"})
        start = threading.Barrier(2)
        answers: list[Any] = []
        lock = threading.Lock()

        def send(h: Harness, req: pb.ExecuteRequest = request, gate: threading.Barrier = start,
                 out: list[Any] = answers, held: threading.Lock = lock) -> None:
            gate.wait()
            try:
                answer: Any = h.stub.Execute(req, timeout=120).receipt
            except grpc.RpcError as exc:
                answer = detail_code(exc)
            with held:
                out.append(answer)

        threads = [threading.Thread(target=send, args=(h,)) for h in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        ran = [r for r in answers if isinstance(r, pb.Receipt) and not r.replayed]
        others = [r for r in answers if not (isinstance(r, pb.Receipt) and not r.replayed)]
        assert len(ran) == 1 and ran[0].exit_code == 0, answers
        # the other one found the claim taken: refused while it ran, or its receipt once it had
        assert len(others) == 1 and (others[0] == "already_started" or others[0].output == ran[0].output), answers
        assert _created(docker_api, request.grant.decision_id, since) == 1


def test_the_database_stopped_refuses_with_the_code_and_started_serves_without_a_restart(
    fleet, docker_api, pg_server
) -> None:
    a, b = fleet
    assert a.execute("sh_secret", {"script": "echo before"}).output.strip() == "before"
    since = time.time()
    refused_request = a.request("sh_secret", {"script": "echo never"})
    pg_server.stop()
    try:
        for h in (a, b):
            with pytest.raises(grpc.RpcError) as refused:
                h.stub.Execute(refused_request, timeout=60)
            assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            assert detail_code(refused.value) == "store_unavailable"
        deadline = time.monotonic() + BOUND
        while _health(a) != health_pb2.HealthCheckResponse.NOT_SERVING:
            assert time.monotonic() < deadline, "health stayed SERVING with the database gone"
            time.sleep(0.2)
    finally:
        pg_server.start()
    assert _created(docker_api, refused_request.grant.decision_id, since) == 0  # nothing ran unclaimed
    # the same processes, no restart: each serves again once its pool has found the database (the
    # pool retries with a growing backoff, so one may take a few seconds longer than the other)
    assert _serves_again(b, "echo after").output.strip() == "after"
    # the grant refused while the database was gone was never spent: it runs now, once
    again = _serves_again(a, refused_request)
    assert again.output.strip() == "never" and not again.replayed
    deadline = time.monotonic() + RECOVERY_BOUND
    while _health(a) != health_pb2.HealthCheckResponse.SERVING:
        assert time.monotonic() < deadline, "health stayed NOT_SERVING after the database came back"
        time.sleep(0.2)


def _serves_again(h: Harness, call: str | pb.ExecuteRequest) -> pb.Receipt:
    """The receipt of `call` (a script, or a request) once `h` serves again; until then, only
    store_unavailable refusals."""
    deadline = time.monotonic() + RECOVERY_BOUND
    while True:
        request = h.request("sh_secret", {"script": call}) if isinstance(call, str) else call
        try:
            return h.stub.Execute(request, timeout=120).receipt
        except grpc.RpcError as exc:
            assert detail_code(exc) == "store_unavailable", exc
            assert time.monotonic() < deadline, "the toolrunner did not come back after the database did"
            time.sleep(0.5)


def _serve(tmp_path: Path, data: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """`warden toolrunner serve` expected to stop at start: its exit code and one line."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "warden.cli", "toolrunner", "serve", "--data", str(data),
                           "--policies", str(ROOT / "policies"), "--address", "127.0.0.1:0", *flags],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_serve_stops_at_start_on_a_store_it_cannot_use(docker_api, signing_key, pg_url, tmp_path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    signing_key.save(data / "grant.key")
    done = _serve(tmp_path, data, "--store", pg_url)
    assert done.returncode == 2 and "[store_schema_mismatch]" in done.stderr, done.stderr
    assert "warden store migrate" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    url = _migrated(pg_url)
    name = f"tr-{uuid.uuid4().hex[:6]}"
    holder = start_harness(docker_api, signing_key, tmp_path / "holder", store=url, instance=name)
    try:
        done = _serve(tmp_path, data, "--store", pg_url, "--instance", name)
        assert done.returncode == 2 and "[instance_in_use]" in done.stderr, done.stderr
    finally:
        holder.close()
    done = _serve(tmp_path, data, "--store", pg_url, "--instance", "no spaces")
    assert done.returncode == 2 and "[invalid_instance]" in done.stderr, done.stderr


def test_a_lost_instance_lock_refuses_calls_and_health_until_it_is_taken_again(docker_api, signing_key, pg_url,
                                                                               tmp_path) -> None:
    """The instance lock's connection terminated from another session (as an operator's
    pg_terminate_backend, or a restart, would): nothing is claimed under a name this toolrunner may
    no longer hold, health says NOT_SERVING, and the health watch takes the name back by itself."""
    url = _migrated(pg_url)
    a = start_harness(docker_api, signing_key, tmp_path / "a", store=url, instance="tr-lock")
    try:
        assert a.execute("sh_secret", {"script": "echo before"}).output.strip() == "before"
        with Database(url, name="killer", max_size=1) as db, db.connection() as conn:
            killed = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                ("warden-toolrunner-instance",)).fetchall()
        assert len(killed) == 1
        since = time.time()
        refused_request = a.request("sh_secret", {"script": "echo never"})
        with pytest.raises(grpc.RpcError) as refused:
            a.stub.Execute(refused_request, timeout=60)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert detail_code(refused.value) == "store_unavailable" and "lost its lock" in refused.value.details()
        assert _created(docker_api, refused_request.grant.decision_id, since) == 0  # nothing ran unclaimed
        # the name is free meanwhile: the watch takes it again (every 2 s) and service resumes
        again = _serves_again(a, refused_request)
        assert again.output.strip() == "never" and not again.replayed
        deadline = time.monotonic() + BOUND
        while _health(a) != health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline, "health stayed NOT_SERVING after the lock was taken again"
            time.sleep(0.2)
        second = tmp_path / "second"
        second.mkdir(mode=0o700)
        signing_key.save(second / "grant.key")
        done = _serve(tmp_path, second, "--store", pg_url, "--instance", "tr-lock")
        assert done.returncode == 2 and "[instance_in_use]" in done.stderr, done.stderr  # held again, for real
    finally:
        a.close()
