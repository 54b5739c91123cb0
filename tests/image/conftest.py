"""Fixtures for the image tests: warden:local built (skipped when up to date) by
scripts/build-warden-image.sh, and a real container of it with its port published on 127.0.0.1.

Without a Docker engine, or when the image cannot be built, these tests FAIL (never skip) with
what the script said. No container these tests start outlives them (label warden.test=image).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from warden.grants import SigningKey

ROOT = Path(__file__).resolve().parents[2]
TAG = "warden:local"
UID = 10001  # the image's user (deploy/Dockerfile)
LABEL = "warden.test=image"
DRIVER_TOKEN = "image-test-driver-token-0123456789"


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], capture_output=True).returncode:
        pytest.fail("no Docker engine answers; run scripts/ensure-docker.sh", pytrace=False)
    build = subprocess.run([str(ROOT / "scripts" / "build-warden-image.sh"), "checkpoint"],
                           capture_output=True, text=True, timeout=900)
    if build.returncode != 0:
        pytest.fail(f"scripts/build-warden-image.sh failed:\n{build.stdout}{build.stderr}", pytrace=False)
    yield TAG
    left = docker("ps", "-aq", "--filter", f"label={LABEL}").stdout.split()
    if left:
        docker("rm", "-f", *left, check=False)
    assert not left, f"the image tests left {len(left)} container(s) behind"


@dataclass
class Container:
    name: str
    address: str  # 127.0.0.1:PORT, published
    data: Path  # the host folder mounted at /var/lib/warden
    key: SigningKey

    def exec(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return docker("exec", self.name, *argv, check=check)

    def state(self) -> dict:
        return json.loads(docker("inspect", "--format", "{{json .State}}", self.name).stdout)


def prepare_data(data: Path) -> SigningKey:
    """What an operator provides: the grant key and a caller token, owned by the image's user
    and readable by it only (the checkpoint refuses a token file others can read)."""
    data.mkdir()
    key = SigningKey.generate()
    key.save(data / "grant.key")
    tokens = data / "checkpoint.tokens"
    tokens.write_text(f"driver {DRIVER_TOKEN}\n")
    for path in (data, data / "grant.key", tokens):
        path.chmod(0o700 if path.is_dir() else 0o600)
        shutil.chown(path, UID, UID)
    return key


def wait_healthy(name: str, timeout: float = 90) -> None:
    """Until Docker's own HEALTHCHECK (the image's) calls the container healthy."""
    deadline = time.monotonic() + timeout
    while True:
        state = json.loads(docker("inspect", "--format", "{{json .State}}", name).stdout)
        status = (state.get("Health") or {}).get("Status")
        if status == "healthy":
            return
        if not state.get("Running") or time.monotonic() > deadline:
            logs = docker("logs", name, check=False)
            raise AssertionError(f"{name} is {status or state.get('Status')}, not healthy:\n"
                                 f"{json.dumps(state.get('Health'), indent=1)}\n{logs.stdout}{logs.stderr}")
        time.sleep(0.5)


@pytest.fixture
def container(image: str, tmp_path: Path) -> Iterator[Container]:
    data = tmp_path / "data"
    key = prepare_data(data)
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    name = f"warden-image-test-{uuid.uuid4().hex[:10]}"
    docker(
        "run", "-d", "--name", name, "--label", LABEL,
        "--publish", "127.0.0.1::7401",
        "--volume", f"{data}:/var/lib/warden",
        "--volume", f"{policies}:/etc/warden/policies:ro",
        # The image's own health check command, asked every second instead of every ten so the
        # test need not wait; what it runs is the image's.
        "--health-interval", "1s",
        image,
    )
    try:
        wait_healthy(name)
        port = docker("port", name, "7401/tcp").stdout.split()[0].rsplit(":", 1)[1]
        yield Container(name, f"127.0.0.1:{port}", data, key)
    finally:
        docker("rm", "-f", name, check=False)
