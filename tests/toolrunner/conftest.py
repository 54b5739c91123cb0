"""Fixtures for the toolrunner tests: a real Docker engine, the local tool image, a real gRPC
server on port 0, and grants signed with a real key (helpers in toolrunner_harness.py).

Without a Docker engine the container tests FAIL (never skip) with a message saying how to get
one. After the session, no container labelled by these tests may be left.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import docker
import pytest
from toolrunner_harness import ROOT, Harness, session_containers, start_harness

from toolrunner.errors import DockerUnavailable
from warden import grants


@pytest.fixture(scope="session")
def docker_api() -> Iterator[docker.APIClient]:
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as exc:
        pytest.fail(f"{DockerUnavailable(str(exc).splitlines()[0][:200])}", pytrace=False)
    build = subprocess.run([str(ROOT / "scripts" / "build-images.sh")], capture_output=True, text=True)
    if build.returncode != 0:
        pytest.fail(f"scripts/build-images.sh failed:\n{build.stdout}{build.stderr}", pytrace=False)
    yield client.api
    leftovers = session_containers(client.api)
    for c in leftovers:
        client.api.remove_container(c["Id"], force=True)
    assert not leftovers, f"the toolrunner tests left {len(leftovers)} labelled container(s) behind"


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> grants.SigningKey:
    key = grants.SigningKey.generate()
    path = tmp_path_factory.mktemp("keys") / "grant.key"
    key.save(path)
    return grants.SigningKey.load(path)  # what `serve` does: the file written by save()


@pytest.fixture(scope="module")
def harness(docker_api: docker.APIClient, signing_key: grants.SigningKey, tmp_path_factory) -> Iterator[Harness]:
    h = start_harness(docker_api, signing_key, tmp_path_factory.mktemp("toolrunner"))
    yield h
    h.close()


