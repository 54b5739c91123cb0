"""deploy/compose.fleet.yaml as docker-compose reads it (`config`): PostgreSQL from warden's own
image, the schema migrated once before any node starts, two checkpoint replicas that share their
keys but not their data folders, and every warden process on the one store URL, its password read
from a file that no service definition holds."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from image_harness import compose_command

ROOT = Path(__file__).resolve().parents[2]
FLEET = ROOT / "deploy" / "compose.fleet.yaml"
REPLICAS = ("checkpoint-1", "checkpoint-2")
ON_THE_STORE = (*REPLICAS, "migrate", "toolrunner", "driver")
PASSWORD_FILE = "/run/warden-store/password"


@pytest.fixture(scope="module")
def services() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {"DOCKER_GID": "4242"}
    done = subprocess.run([*compose_command(), "-f", str(FLEET), "config"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["services"]


def _mounts(service: dict) -> dict[str, dict]:
    """target -> the mount: docker-compose 1.29 writes `source:target[:ro]`, the plugin a mapping."""
    out = {}
    for v in service.get("volumes", []):
        if isinstance(v, str):
            source, target, *mode = v.split(":")
            v = {"source": source, "target": target, "read_only": mode == ["ro"]}
        out[v["target"]] = v
    return out


def _port(port: str | dict) -> tuple[str, str]:
    """(host address, published port) of either form."""
    if isinstance(port, dict):
        return port["host_ip"], str(port["published"])
    host, published, _ = port.split(":")
    return host, published


def _depends(service: dict) -> dict[str, str]:
    return {name: d["condition"] for name, d in service.get("depends_on", {}).items()}


def test_every_warden_process_is_on_the_one_store_and_reads_its_password_from_a_file(services):
    urls = {services[name]["environment"]["WARDEN_STORE"] for name in ON_THE_STORE}
    assert urls == {"postgresql://warden@postgres:5432/warden"}  # no password in the URL
    for name in (*ON_THE_STORE, "postgres"):
        service = services[name]
        assert service["environment"]["WARDEN_STORE_PASSWORD_FILE"] == PASSWORD_FILE, name
        mount = _mounts(service)[str(Path(PASSWORD_FILE).parent)]
        assert (mount["source"], mount["read_only"]) == ("store-password", True), name


def test_the_database_is_migrated_before_any_node_starts(services):
    assert services["postgres"]["image"] == "warden-postgres:local"
    assert _depends(services["postgres"]) == {"keys": "service_completed_successfully"}  # the password first
    assert services["migrate"]["command"] == ["store", "migrate"]
    assert _depends(services["migrate"]) == {"postgres": "service_healthy"}
    for name in (*REPLICAS, "toolrunner"):
        assert _depends(services[name]) == {"migrate": "service_completed_successfully"}, name
    assert _depends(services["driver"]) == {name: "service_healthy" for name in (*REPLICAS, "toolrunner")}
    # the health check asks as `postgres` over the socket, which peer lets in: no failed login logged
    check = services["postgres"]["healthcheck"]["test"]
    assert check[1:3] == ["setpriv", "--reuid=postgres"] and "pg_isready" in check
    assert "--username=postgres" in check


def test_the_replicas_share_their_keys_read_only_and_keep_a_data_folder_each(services):
    data = set()
    for name in REPLICAS:
        service = services[name]
        argv = service["command"]
        assert argv[:2] == ["checkpoint", "serve"] and service["image"] == "warden:local"
        mounts = _mounts(service)
        for flag in ("--key", "--tokens"):
            path = Path(argv[argv.index(flag) + 1])
            assert mounts[str(path.parent)]["source"] == "checkpoint-keys" and mounts[str(path.parent)]["read_only"]
        folder = argv[argv.index("--data") + 1]
        # the token-signing keys a run token is verified with: DATA/token-keys, the same at both
        assert (mounts[f"{folder}/token-keys"]["source"], mounts[f"{folder}/token-keys"]["read_only"]) == \
            ("token-keys", True)
        data.add(mounts[folder]["source"])
        assert service["networks"]["default"]["aliases"] == ["checkpoint"]
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"] and "user" not in service
    assert data == {"checkpoint-1-data", "checkpoint-2-data"}
    # the driver asks the alias both replicas answer to
    argv = services["driver"]["command"]
    assert argv[argv.index("--checkpoint") + 1] == "checkpoint:7401"


def test_ports_are_on_loopback_and_the_database_is_published_nowhere(services):
    assert "ports" not in services["postgres"]
    hosts = set()
    for name, service in services.items():
        for port in service.get("ports", []):
            host, published = _port(port)
            assert host == "127.0.0.1", (name, port)
            hosts.add(published)
    assert len(hosts) == len([p for s in services.values() for p in s.get("ports", [])])  # no clash


def test_postgres_runs_with_only_the_capabilities_its_first_start_needs(services):
    db = services["postgres"]
    assert db["cap_drop"] == ["ALL"] and set(db["cap_add"]) == {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID"}
    assert db["read_only"] is True and "no-new-privileges:true" in db["security_opt"]


def test_every_warden_process_serves_metrics(services):
    for name in ("checkpoint-1", "checkpoint-2", "toolrunner", "driver"):
        argv = services[name]["command"]
        assert "--metrics-address" in argv, name
    ports = {name: services[name]["command"][services[name]["command"].index("--metrics-address") + 1]
             for name in ("toolrunner", "driver")}
    assert ports == {"toolrunner": "0.0.0.0:9402", "driver": "0.0.0.0:9403"}
