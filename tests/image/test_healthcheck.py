"""`python -m warden.healthcheck`, the images' health check, against a real checkpoint on a real
port (no Docker needed): exit 0 only on SERVING, 1 on NOT_SERVING, on an unknown entry and on a
port where nothing answers, over TCP and over the Unix socket."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from checkpoint.server import AuthPolicy, create_server
from warden.grants import SigningKey

ROOT = Path(__file__).resolve().parents[2]


def probe(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.healthcheck", *args], capture_output=True, text=True,
                          timeout=30)


def start(tmp_path: Path, policies: Path) -> tuple:
    server, port = create_server(
        "127.0.0.1:0", uds_path=tmp_path / "cp.sock", policy_dir=policies, data_dir=tmp_path / "data",
        key=SigningKey.generate(), auth=AuthPolicy(tokens={hashlib.sha256(b"t" * 32).digest(): "driver"}),
        watch_interval=None,
    )
    server.start()
    return server, port


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[tuple]:
    server, port = start(tmp_path, ROOT / "policies")
    yield server, port
    server.stop(grace=0.5)


def test_serving_is_exit_0_over_tcp_and_the_socket(serving):
    server, port = serving
    done = probe(f"127.0.0.1:{port}")
    assert (done.returncode, done.stdout.strip()) == (0, f"127.0.0.1:{port}: SERVING"), done.stderr
    assert probe(f"unix:{server.uds_path}").returncode == 0
    # the address may come from the environment, as in the image
    env = os.environ | {"WARDEN_HEALTH_ADDRESS": f"127.0.0.1:{port}"}
    done = subprocess.run([sys.executable, "-m", "warden.healthcheck"], capture_output=True, text=True,
                          timeout=30, env=env)
    assert done.returncode == 0, done.stderr


def test_an_unknown_health_entry_is_exit_1(serving):
    _, port = serving
    done = probe(f"127.0.0.1:{port}", "--service", "no.such.Service")
    assert done.returncode == 1 and "NOT_FOUND" in done.stderr


def test_nothing_listening_is_exit_1():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: nothing answers there
        done = probe(f"127.0.0.1:{port}", "--timeout", "1")
    assert done.returncode == 1 and ("UNAVAILABLE" in done.stderr or "DEADLINE_EXCEEDED" in done.stderr)


def test_not_serving_without_a_loaded_policy_set_is_exit_1(tmp_path):
    policies = tmp_path / "policies"
    shutil.copytree(ROOT / "policies", policies)
    (policies / "agents" / "broken.yaml").write_text("kind: Agent\nname: [not, a, name\n")
    server, port = start(tmp_path, policies)
    try:
        done = probe(f"127.0.0.1:{port}")
    finally:
        server.stop(grace=0.5)
    assert (done.returncode, done.stdout.strip()) == (1, f"127.0.0.1:{port}: NOT_SERVING")
