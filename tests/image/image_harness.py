"""What the image tests share: the docker CLI, the image's facts, a running container's handle,
and the data folder an operator would give it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from warden.grants import SigningKey

ROOT = Path(__file__).resolve().parents[2]
TAG = "warden:local"
UID = 10001  # the image's user (deploy/Dockerfile)
# one label per test process: two test runs on one engine (CI beside a developer's run) must
# neither count nor remove each other's containers
LABEL = f"warden.test=image-{os.getpid()}"
DRIVER_TOKEN = "image-test-driver-token-0123456789"


def compose_command() -> list[str]:
    """Debian's docker-compose, else the `docker compose` plugin; a failure (never a skip) without."""
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    import pytest

    pytest.fail("neither docker-compose nor the `docker compose` plugin is installed: "
                "apt-get install -y docker-compose", pytrace=False)


def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} exited {done.returncode}:\n{done.stdout}{done.stderr}")
    return done


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
