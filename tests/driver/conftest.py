"""Real parts for the loop tests: a checkpoint and a toolrunner on port 0, a driver store on disk."""

from __future__ import annotations

import shutil
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
    from checkpoint.server.app import create_server
    from checkpoint.server.auth import AuthPolicy

    server, port = create_server("127.0.0.1:0", policy_dir=policy_dir, data_dir=tmp_path / "cp", key=grant_key,
                                 auth=AuthPolicy(allow_unauthenticated_tcp=True), watch_interval=None)
    server.start()
    server.address = f"127.0.0.1:{port}"
    yield server
    server.stop(0)


@pytest.fixture()
def toolrunner_server(tmp_path: Path, policy_dir: Path, grant_key) -> Iterator[Any]:
    from checkpoint.policy import load_policy_dir
    from toolrunner.errors import DockerUnavailable
    from toolrunner.server import create_server

    try:
        running, port = create_server("127.0.0.1:0", tools={n: getattr(t, "spec", t) for n, t in load_policy_dir(policy_dir).tools.items()},
                                      keys=grant_key,
                                      data_dir=tmp_path / "tr", reap_interval_seconds=3600)
    except DockerUnavailable as exc:
        pytest.skip(f"no Docker engine: {exc}")
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
