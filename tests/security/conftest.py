"""A real checkpoint on a random port, for the tests that need the wire (see tests/server too)."""

from __future__ import annotations

import hashlib
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest

from checkpoint.server import AuthPolicy, CheckpointServer, create_server
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.grants import SigningKey

REPO = Path(__file__).resolve().parents[2]
TOKEN = "security-token-0123456789abcdef"


@dataclass
class Running:
    server: CheckpointServer
    port: int
    data: Path
    policies: Path
    channels: list[grpc.Channel] = field(default_factory=list)

    def channel(self, token: str | None = TOKEN) -> grpc.Channel:
        metadata = [("authorization", f"Bearer {token}")] if token else []
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.channels.append(channel)
        return grpc.intercept_channel(channel, _Metadata(metadata)) if metadata else channel

    def stub(self, token: str | None = TOKEN) -> pb_grpc.CheckpointServiceStub:
        return pb_grpc.CheckpointServiceStub(self.channel(token))

    def version(self, agent: str) -> str:
        policies = self.server.store.current
        assert policies is not None
        return policies.agents[agent].version


class _Metadata(grpc.UnaryUnaryClientInterceptor):
    def __init__(self, metadata: list[tuple[str, str]]):
        self.metadata = metadata

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(details._replace(metadata=list(details.metadata or []) + self.metadata), request)


def tool_call(agent: str, version: str, tool: str, args: dict[str, Any], run_id: str = "run-1") -> pb.CheckRequest:
    req = pb.CheckRequest(
        run=pb.RunContext(
            tenant="acme", run_id=run_id, root_run_id=run_id, mode=pb.RUN_MODE_INTERACTIVE,
            actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                         pb.Actor(kind=pb.ACTOR_KIND_AGENT, id=agent, agent_version=version, run_id=run_id)],
        ),
        tool_call=pb.ToolCall(tool=tool),
    )
    req.tool_call.arguments.update(args)
    return req


def wait_for(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "") -> Any:
    """Wait for a state, not for a time: the bound only turns a hang into a failure."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or predicate}"
        time.sleep(0.01)


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    target = tmp_path / "policies"
    shutil.copytree(REPO / "policies", target)
    return target


@pytest.fixture
def start(tmp_path: Path, policy_dir: Path) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def _start(**overrides: Any) -> Running:
        data = overrides.pop("data_dir", tmp_path / f"data{len(started)}")
        kwargs: dict[str, Any] = dict(
            policy_dir=policy_dir,
            data_dir=data,
            key=SigningKey.generate(),
            auth=AuthPolicy(tokens={hashlib.sha256(TOKEN.encode()).digest(): "tests"}),
        )
        kwargs.update(overrides)
        server, port = create_server("127.0.0.1:0", **kwargs)
        server.start()
        running = Running(server, port, Path(data), Path(kwargs["policy_dir"]))
        started.append(running)
        return running

    yield _start
    for running in started:
        for channel in running.channels:
            channel.close()
        running.server.stop(grace=0.5)
