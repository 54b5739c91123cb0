"""deploy/compose.yaml as docker-compose reads it (`config`), and the key layout its one-shot
`keys` service makes with `warden up --prepare-only`. Running the stack itself needs the
warden-all image and a Docker socket for the toolrunner; docs/deploy.md shows it done by hand."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from image_harness import compose_command

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
SERVING = {"checkpoint": "7401", "toolrunner": "7402", "driver": "7403"}


def config(**env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "DOCKER_GID"} | env
    return subprocess.run([*compose_command(), "-f", str(COMPOSE), "config"], capture_output=True, text=True,
                          env=environ, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict:
    done = config(DOCKER_GID="4242")
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def test_every_process_is_health_checked_on_the_port_it_serves(services):
    for name, port in SERVING.items():
        service = services[name]
        argv = service["command"]
        assert argv[:2] == [name, "serve"] and argv[argv.index("--address") + 1] == f"0.0.0.0:{port}"
        assert service["healthcheck"]["test"] == ["CMD", "/opt/warden/bin/python", "-m", "warden.healthcheck",
                                                  f"127.0.0.1:{port}"]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert "user" not in service  # the image's non-root user
    # the driver starts only once both peers answer SERVING; both wait for the key material
    assert services["driver"]["depends_on"] == {"checkpoint": {"condition": "service_healthy"},
                                                "toolrunner": {"condition": "service_healthy"}}
    for name in ("checkpoint", "toolrunner"):
        assert services[name]["depends_on"] == {"keys": {"condition": "service_completed_successfully"}}
    assert services["checkpoint"]["image"] == "warden:local"  # the checkpoint-only image


def test_ports_are_published_on_loopback_only(services):
    published = [(name, p) for name, s in services.items() for p in s.get("ports", [])]
    assert published, "nothing published: the operator's CLI on the host could reach nothing"
    for name, port in published:
        host_ip = port["host_ip"] if isinstance(port, dict) else port.split(":")[0]
        assert host_ip == "127.0.0.1", (name, port)


def test_only_the_toolrunner_gets_the_docker_socket_and_each_process_only_its_own_volume(services):
    def sources(service: dict) -> set[str]:
        return {v["source"] if isinstance(v, dict) else v.split(":")[0] for v in service.get("volumes", [])}

    socket_holders = {n for n, s in services.items() if "/var/run/docker.sock" in sources(s)}
    assert socket_holders == {"toolrunner"}
    assert services["toolrunner"]["group_add"] == ["4242"]
    for name in SERVING:
        own = {v for v in sources(services[name]) if v.endswith("-data") or v == "operator"}
        assert own == {f"{name}-data"}, (name, own)


def test_without_the_docker_group_the_file_is_refused():
    done = config()
    assert done.returncode != 0 and "DOCKER_GID" in done.stderr


def test_prepare_only_lays_out_each_process_folder_and_keeps_it(tmp_path):
    data = tmp_path / "w"

    def prepare() -> str:
        done = subprocess.run([sys.executable, "-m", "warden.cli", "up", "--prepare-only", "--data", str(data),
                               "--policies", str(ROOT / "policies")], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    prepare()
    names = {d: {p.name for p in (data / d).iterdir()} for d in ("checkpoint", "toolrunner", "driver")}
    assert names == {
        "checkpoint": {"grant.key", "checkpoint.tokens"},
        "toolrunner": {"grant.key", "toolrunner.tokens"},
        "driver": {"checkpoint.tokens", "operators.tokens", "toolrunner.tokens"},  # never a grant key
    }
    key = (data / "checkpoint" / "grant.key").read_bytes()
    assert (data / "toolrunner" / "grant.key").read_bytes() == key
    for path in data.rglob("*"):
        assert path.stat().st_mode & 0o077 == 0, path
    prepare()  # a second start of the stack keeps the keys it made
    assert (data / "checkpoint" / "grant.key").read_bytes() == key
    assert (data / "toolrunner" / "grant.key").read_bytes() == key


METRICS = {"checkpoint": "9401", "toolrunner": "9402", "driver": "9403"}


def test_every_process_serves_metrics_on_a_port_of_its_own_published_on_loopback(services):
    for name, port in METRICS.items():
        argv = services[name]["command"]
        assert argv[argv.index("--metrics-address") + 1] == f"0.0.0.0:{port}", name
        published = {(p["host_ip"], str(p["target"])) for p in services[name]["ports"] if isinstance(p, dict)} or {
            (p.split(":")[0], p.rsplit(":", 1)[1].removesuffix("/tcp")) for p in services[name]["ports"]}
        assert ("127.0.0.1", port) in published, (name, services[name]["ports"])
    assert len(set(METRICS.values())) == 3
