"""Fixtures for the image tests: warden:local built (skipped when up to date) by
scripts/build-warden-image.sh, and a real container of it with its port published on 127.0.0.1.

Without a Docker engine, or when the image cannot be built, these tests FAIL (never skip) with
what the script said. No container these tests start outlives them (label warden.test=image-PID, one per test run).
"""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_harness import LABEL, ROOT, TAG, Container, docker, prepare_data, wait_healthy


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
