"""A real checkpoint on a loopback port, with the shipped policies and the MCP example added, its
shared folder moved to the test's own temporary folder."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from checkpoint.audit import DecisionReader
from checkpoint.server import AuthPolicy, create_server
from warden.grants import SigningKey

REPO = Path(__file__).resolve().parents[2]
GATEWAY_TOKEN = "mcp-gateway-token-0123456789abcdef"
ALICE_TOKEN = "alice-token-0123456789abcdef"


@dataclass
class Checkpoint:
    address: str
    data: Path
    shared: Path  # the folder the example policy's scope allows
    server: Any = None

    def records(self) -> list[dict]:
        return [r for r in DecisionReader(self.data / "decisions.db").read() if r["action"] != "catalog"]


def policy_folder(tmp_path: Path, shared: Path) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(REPO / "policies", target)
    for path in (REPO / "examples" / "mcp" / "policies").rglob("*.yaml"):
        out = target / path.relative_to(REPO / "examples" / "mcp" / "policies")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(path.read_text().replace("/srv/shared", str(shared)))
    return target


@pytest.fixture
def checkpoint(tmp_path: Path) -> Iterator[Checkpoint]:
    shared = tmp_path / "shared"
    shared.mkdir()
    data = tmp_path / "checkpoint-data"
    tokens = {hashlib.sha256(GATEWAY_TOKEN.encode()).digest(): "mcp-gateway",
              hashlib.sha256(ALICE_TOKEN.encode()).digest(): "alice"}
    server, port = create_server("127.0.0.1:0", uds_path=tmp_path / "cp.sock", policy_dir=policy_folder(tmp_path, shared),
                                 data_dir=data, key=SigningKey.generate(), auth=AuthPolicy(tokens=tokens),
                                 watch_interval=0.05, settle=0.1)
    server.start()
    yield Checkpoint(f"127.0.0.1:{port}", data, shared, server)
    server.stop(grace=0.5)
