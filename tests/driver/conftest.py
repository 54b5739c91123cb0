"""Real parts for the loop tests: a checkpoint and a toolrunner on port 0, a driver store on disk."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))  # driver_fake_anthropic and driver_harness

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def policy_dir(tmp_path: Path) -> Path:
    dest = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", dest)
    return dest


@pytest.fixture()
def grant_key():
    from warden.grants import SigningKey

    return SigningKey.generate()


@pytest.fixture()
def checkpoint_server(tmp_path: Path, policy_dir: Path, grant_key) -> Iterator[Any]:
    from driver_harness import CHECKPOINT_TOKEN, PERSON_TOKEN

    from checkpoint.server.app import create_server
    from warden.auth import AuthPolicy

    tokens = {hashlib.sha256(CHECKPOINT_TOKEN.encode()).digest(): "driver",  # the driver principal
              hashlib.sha256(PERSON_TOKEN.encode()).digest(): "bob"}  # a person (the people principal)
    server, port = create_server("127.0.0.1:0", policy_dir=policy_dir, data_dir=tmp_path / "cp", key=grant_key,
                                 auth=AuthPolicy(tokens=tokens), watch_interval=None)
    server.start()
    server.address = f"127.0.0.1:{port}"
    yield server
    server.stop(0)


def require_docker() -> None:
    """No Docker engine is a failure that says how to get one, never a silent skip."""
    from toolrunner.errors import DockerUnavailable
    from toolrunner.server import connect_docker

    try:
        connect_docker()
    except DockerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tool_images() -> None:
    """The tool images, built (or found up to date) once per session, whichever tests run first."""
    require_docker()
    build = subprocess.run([str(ROOT / "scripts" / "build-images.sh")], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"scripts/build-images.sh failed:\n{build.stdout}{build.stderr}", pytrace=False)


@pytest.fixture()
def toolrunner_server(tmp_path: Path, policy_dir: Path, grant_key, tool_images) -> Iterator[Any]:
    from driver_harness import TOOLRUNNER_TOKEN

    from toolrunner.server import create_server

    running, port = create_server("127.0.0.1:0", policy_dir=policy_dir, keys=grant_key, data_dir=tmp_path / "tr",
                                  reap_interval_seconds=3600,
                                  tokens={hashlib.sha256(TOOLRUNNER_TOKEN.encode()).digest(): "driver"})
    running.address = f"127.0.0.1:{port}"
    yield running
    running.stop(0)


@pytest.fixture()
def stack(tmp_path: Path, policy_dir: Path, checkpoint_server, toolrunner_server):
    from driver_harness import Stack

    s = Stack(tmp_path, policy_dir, checkpoint_server.address, toolrunner_server.address)
    yield s
    s.close()


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
