"""deploy/compose.fleet.yaml run for real: PostgreSQL from warden-postgres:local, the one-shot
migrate, and two checkpoint replicas from warden:local. A run started at one replica is decided at
each, a cancel at one is refused at the other through the database, the schema is current, the
password is in no container's environment nor log, the documented backup restores, a rotated key signs
at every replica, and the database stopped and started again refuses, then serves, with no restart.

It needs a second image and five containers (48 s with both images up to date, plus 57-82 s to
build warden-postgres:local cold, here), so it runs when WARDEN_TEST_FLEET_COMPOSE=1, which CI sets;
without it each test says so and skips. With it, a missing engine, image or tool is a failure, as
in the other image tests."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from image_harness import ROOT, compose_command, docker, wait_healthy

from driver.clients import CheckpointClient
from warden.checkpoint.v1 import checkpoint_pb2 as pb

FLEET = ROOT / "deploy" / "compose.fleet.yaml"
FLEET_ENV = "WARDEN_TEST_FLEET_COMPOSE"
REPLICAS = ("checkpoint-1", "checkpoint-2")
ENDED_WITHIN = 1.0  # seconds: a replica's memory of ended runs is never older (docs/fleet.md)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Fleet:
    project: str
    env: dict[str, str]
    addresses: dict[str, str]  # replica -> 127.0.0.1:PORT
    token: str  # the driver's token, as the keys service made it

    def compose(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*compose_command(), "-p", self.project, "-f", str(FLEET), *args],
                              capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"compose {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        return done

    def exec(self, service: str, *argv: str, user: str | None = None) -> str:
        return self.compose("exec", "-T", *(("--user", user) if user else ()), service, *argv).stdout

    def client(self, replica: str) -> CheckpointClient:
        return CheckpointClient(self.addresses[replica], token=self.token)


@pytest.fixture(scope="module")
def fleet(request) -> Iterator[Fleet]:
    if os.environ.get(FLEET_ENV) != "1":
        pytest.skip(f"the fleet's compose run builds two images and starts five containers; {FLEET_ENV}=1 runs it")
    request.getfixturevalue("image")  # warden:local, built when out of date
    built = subprocess.run([str(ROOT / "scripts" / "build-postgres-image.sh")], capture_output=True, text=True,
                           timeout=900)
    if built.returncode != 0:
        pytest.fail(f"scripts/build-postgres-image.sh failed:\n{built.stdout}{built.stderr}", pytrace=False)
    ports = {"WARDEN_CHECKPOINT_PORT": _free_port(), "WARDEN_CHECKPOINT_2_PORT": _free_port()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {"DOCKER_GID": "4242"} | \
        {k: str(v) for k, v in ports.items()}
    fleet = Fleet(f"wardenfleet{uuid.uuid4().hex[:8]}", env,
                  {r: f"127.0.0.1:{p}" for r, p in zip(REPLICAS, ports.values(), strict=True)}, "")
    try:
        fleet.compose("up", "-d", *REPLICAS)
        for replica in REPLICAS:
            wait_healthy(fleet.compose("ps", "-q", replica).stdout.strip())
        tokens = fleet.exec("checkpoint-1", "cat", "/etc/warden/keys/checkpoint.tokens")
        fleet.token = next(line.split()[1] for line in tokens.splitlines() if line.startswith("driver "))
        yield fleet
    finally:
        fleet.compose("down", "-v", "--remove-orphans", check=False)


def _get_task(run_token: str) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=run_token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-1"})
    return req


def _start(client: CheckpointClient, agent: str = "recon") -> pb.StartRunResponse:
    started = client.start_run(pb.StartRunRequest(person="alice", agent=agent, mode=pb.RUN_MODE_INTERACTIVE))
    assert started.decision.verdict == pb.VERDICT_ALLOW, started.decision
    return started


def test_a_run_started_at_one_replica_is_decided_at_each(fleet):
    one, two = (fleet.client(r) for r in REPLICAS)
    try:
        run = _start(one)
        answers = [c.check(_get_task(run.run_token)) for c in (one, two)]
        denied = two.check(_get_task(_start(one, "refunds").run_token))
    finally:
        one.close()
        two.close()
    # the run token one replica signed verifies at the other: one set of token keys
    assert [(a.verdict, a.code) for a in answers] == [(pb.VERDICT_ALLOW, "allowed")] * 2, answers
    assert answers[0].decision_id != answers[1].decision_id and all(a.HasField("grant") for a in answers)
    assert (denied.verdict, denied.code) == (pb.VERDICT_DENY, "tool_not_allowed"), denied


def test_a_run_cancelled_at_one_replica_is_refused_at_the_other(fleet):
    one, two = (fleet.client(r) for r in REPLICAS)
    try:
        run = _start(one)
        assert two.check(_get_task(run.run_token)).verdict == pb.VERDICT_ALLOW
        cancelled = one.record_act(pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="cancel",
                                                       person="alice"))
        assert cancelled.code == "recorded", cancelled
        at = time.monotonic()
        while (answer := two.check(_get_task(run.run_token))).verdict == pb.VERDICT_ALLOW:
            assert time.monotonic() - at < ENDED_WITHIN, "the other replica still allows a cancelled run"
    finally:
        one.close()
        two.close()
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "run_ended"), answer
    ended = fleet.exec("postgres", "psql", "-At", "--dbname=warden", "-c",
                       f"SELECT count(*) FROM checkpoint_ended_runs WHERE run_id = '{run.run_id}'", user="postgres")
    assert ended.strip() == "1"  # kept in the database the replicas share, not in either replica


def test_the_schema_is_current_and_the_password_is_in_no_environment_nor_log(fleet):
    status = fleet.compose("run", "--rm", "--no-deps", "migrate", "store", "status")
    assert "postgresql://warden@postgres:5432/warden" in status.stdout, status.stdout
    assert "current" in status.stdout and "behind" not in status.stdout
    password = fleet.exec("checkpoint-1", "cat", "/run/warden-store/password").strip()
    assert len(password) >= 32
    ids = fleet.compose("ps", "-q", "-a").stdout.split()
    assert len(ids) >= 5  # keys, postgres, migrate and both replicas
    for container in ids:
        inspected = docker("inspect", "--format", "{{json .Config.Env}} {{json .Args}}", container).stdout
        assert password not in inspected, container
    logs = fleet.compose("logs", "--no-color").stdout
    assert "migrated from 0" in logs and password not in logs
    # nothing failed to log in: not the health check, not a replica, not the migration
    assert "FATAL" not in logs, [line for line in logs.splitlines() if "FATAL" in line]


def test_the_documented_backup_restores_into_an_empty_database(fleet):
    # docs/fleet.md, "Backup and restore": pg_dump in the database's container, as its superuser
    dump = subprocess.run([*compose_command(), "-p", fleet.project, "-f", str(FLEET), "exec", "-T", "--user",
                           "postgres", "postgres", "pg_dump", "--format=custom", "--dbname=warden"],
                          capture_output=True, env=fleet.env, timeout=120)
    assert dump.returncode == 0 and dump.stdout.startswith(b"PGDMP"), dump.stderr
    fleet.exec("postgres", "createdb", "--owner=warden", "restored", user="postgres")
    restore = subprocess.run([*compose_command(), "-p", fleet.project, "-f", str(FLEET), "exec", "-T", "--user",
                              "postgres", "postgres", "pg_restore", "--exit-on-error", "--dbname=restored"],
                             input=dump.stdout, capture_output=True, env=fleet.env, timeout=120)
    assert restore.returncode == 0, restore.stderr

    def rows(db: str) -> str:
        return fleet.exec("postgres", "psql", "-At", f"--dbname={db}", "-c",
                          "SELECT (SELECT count(*) FROM checkpoint_ended_runs) || ' ' || "
                          "(SELECT string_agg(component || '=' || version, ',' ORDER BY component) FROM warden_schema)",
                          user="postgres").strip()

    assert rows("restored") == rows("warden") and rows("warden").split()[0] != "0"


def test_a_key_rotated_in_the_keys_service_signs_at_every_replica_with_no_restart(fleet):
    one, two = (fleet.client(r) for r in REPLICAS)
    try:
        before = _start(one)
        old = fleet.exec("checkpoint-1", "cat", "/var/lib/warden/token-keys/active").strip()
        # docs/fleet.md, "With docker-compose"
        fleet.compose("run", "--rm", "keys", "warden keys rotate --data /w/checkpoint && chown -R 10001:10001 /w/checkpoint")
        new = fleet.exec("checkpoint-2", "cat", "/var/lib/warden/token-keys/active").strip()
        assert new != old
        deadline = time.monotonic() + 10
        while not all(new in c.token_keys() for c in (one, two)):
            assert time.monotonic() < deadline, "a replica did not take the new key up"
            time.sleep(0.2)
        after = _start(two)
        answers = [one.check(_get_task(run.run_token)) for run in (before, after)]
    finally:
        one.close()
        two.close()
    # the new key signs at one replica and verifies at the other; the old key still verifies
    assert [(a.verdict, a.code) for a in answers] == [(pb.VERDICT_ALLOW, "allowed")] * 2, answers


def test_the_database_stopped_refuses_and_started_again_serves_with_no_restart(fleet):
    one, two = (fleet.client(r) for r in REPLICAS)

    def started_at() -> dict[str, str]:
        return {r: docker("inspect", "--format", "{{.State.StartedAt}}",
                          fleet.compose("ps", "-q", r).stdout.strip()).stdout.strip() for r in REPLICAS}

    before = started_at()
    try:
        run = _start(one)
        fleet.compose("stop", "postgres")
        stopped = time.monotonic()
        try:
            late = []
            while time.monotonic() - stopped < ENDED_WITHIN + 2:
                for client in (one, two):
                    sent = time.monotonic() - stopped
                    answer = client.check(_get_task(run.run_token))
                    if sent > ENDED_WITHIN + 0.5:
                        late.append((answer.verdict, answer.code))
                time.sleep(0.1)
        finally:
            fleet.compose("start", "postgres")
        # nothing a replica cannot vouch for is allowed while the database is gone
        assert late and all(verdict == pb.VERDICT_DENY for verdict, _ in late), set(late)
        deadline = time.monotonic() + 60
        while not all(c.check(_get_task(run.run_token)).verdict == pb.VERDICT_ALLOW for c in (one, two)):
            assert time.monotonic() < deadline, "the replicas did not serve again once the database was back"
            time.sleep(0.5)
    finally:
        one.close()
        two.close()
    assert started_at() == before  # by themselves: neither replica was restarted
