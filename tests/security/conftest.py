"""The real checkpoint of tests/server (a server on a random port, the shipped policies copied),
for the attacks that need the wire; and the helpers the security tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from server.conftest import checkpoint, policy_dir, start  # noqa: F401  (pytest fixtures)

from warden.checkpoint.v1 import checkpoint_pb2 as pb


def tool_call(agent: str, version: str, tool: str, args: dict[str, Any], run_id: str = "run-1") -> pb.CheckRequest:
    """A call with a hand-made run context: what an attacker sends (`Running.with_run` turns it
    into a call of a run the checkpoint started)."""
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
