from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from checkpoint.audit import DecisionLog, DecisionReader
from checkpoint.server import AuthPolicy, CheckpointServer, create_server
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.grants import SigningKey

from .helpers import BearerAuth

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-0123456789abcdef"  # the `driver` principal of the shipped policies
PERSON_TOKEN = "carol-token-0123456789abcdef"  # a person: the `people` principal (approves)


@dataclass
class Running:
    server: CheckpointServer
    port: int
    key: SigningKey
    data: Path
    policies: Path
    channels: list[grpc.Channel]

    def _channel(self, target: str, token: str | None) -> grpc.Channel:
        channel = grpc.insecure_channel(target)
        self.channels.append(channel)
        if token is not None:
            channel = grpc.intercept_channel(channel, BearerAuth(token))
        return channel

    def tcp(self, token: str | None = TOKEN) -> grpc.Channel:
        return self._channel(f"127.0.0.1:{self.port}", token)

    def uds(self) -> grpc.Channel:
        return self._channel(f"unix:{self.server.uds_path}", None)

    def stub(self, token: str | None = TOKEN) -> pb_grpc.CheckpointServiceStub:
        return pb_grpc.CheckpointServiceStub(self.tcp(token))

    def start_run(self, agent: str = "", version: str = "", *, person: str = "alice",
                  mode: int = pb.RUN_MODE_INTERACTIVE, token: str | None = TOKEN, **fields) -> pb.StartRunResponse:
        return self.stub(token).StartRun(
            pb.StartRunRequest(agent=agent, agent_version=version, person=person, mode=mode, **fields), timeout=5
        )

    def with_run(self, request, token: str | None = TOKEN):
        """`request` with its run context replaced by a run started for the same person, agent
        and mode (the checkpoint mints the run id): only budget and has_plan stay the caller's."""
        run = request.run
        chain = run.actor_chain
        started = self.start_run(chain[-1].id if len(chain) > 1 else "", chain[-1].agent_version if len(chain) > 1 else "",
                                 person=chain[0].id, mode=run.mode, token=token)
        assert started.run_token, started.decision
        request.run.CopyFrom(pb.RunContext(run_token=started.run_token, budget=run.budget, has_plan=run.has_plan))
        return request

    def records(self, *, catalog: bool = False) -> list[dict]:
        """The decision log; without `catalog`, less the records of the agent catalog (every agent
        going live at the first load is one), which tests about other acts need not count."""
        log = self.server.log  # the data folder's file, or the table a fleet shares on PostgreSQL
        found = DecisionReader(self.data / "decisions.db").read() if isinstance(log, DecisionLog) else log.read()
        return [r for r in found if catalog or r["action"] != "catalog"]

    def version(self, agent: str) -> str:
        policies = self.server.store.current
        assert policies is not None
        return policies.agents[agent].version


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    """A private copy of the shipped policies, so a test may edit it."""
    target = tmp_path / "policies"
    shutil.copytree(REPO / "policies", target)
    return target


@pytest.fixture
def start(tmp_path: Path, policy_dir: Path) -> Iterator:
    started: list[Running] = []

    def _start(**overrides) -> Running:
        key = overrides.pop("key", None) or SigningKey.generate()
        data = overrides.pop("data_dir", tmp_path / f"data{len(started)}")
        kwargs = dict(
            uds_path=tmp_path / f"cp{len(started)}.sock",
            policy_dir=overrides.pop("policy_dir", policy_dir),
            data_dir=data,
            key=key,
            auth=AuthPolicy(tokens={hashlib.sha256(TOKEN.encode()).digest(): "driver",
                                    hashlib.sha256(PERSON_TOKEN.encode()).digest(): "carol"}),
            watch_interval=0.05,
            settle=0.1,
        )
        kwargs.update(overrides)
        server, port = create_server(kwargs.pop("address", "127.0.0.1:0"), **kwargs)
        server.start()
        running = Running(server, port, key, Path(data), Path(kwargs["policy_dir"]), [])
        started.append(running)
        return running

    yield _start
    for running in started:
        for channel in running.channels:
            channel.close()
        running.server.stop(grace=0.5)


@pytest.fixture
def checkpoint(start) -> Running:
    return start()
