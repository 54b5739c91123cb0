"""The OpenAI Agents SDK, the real package, driven by a local scripted model: every function tool
call is checked with its arguments, and an approval is a person's, at the checkpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, function_tool  # noqa: E402
from agents.items import ModelResponse  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from agents.usage import Usage  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from warden.client import CheckpointClient  # noqa: E402
from warden.hooks.openai_agents import WardenGuard  # noqa: E402

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN  # noqa: E402


class Scripted(Model):
    """Makes `calls` one per turn, then answers with every tool output it was given."""

    def __init__(self, calls: list[tuple[str, dict]]) -> None:
        self.calls = calls

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any) -> ModelResponse:
        items = input if isinstance(input, list) else []
        outputs = [str(i.get("output")) for i in items if isinstance(i, dict) and i.get("type") == "function_call_output"]
        made = sum(1 for i in items if isinstance(i, dict) and i.get("type") == "function_call")
        if made < len(self.calls):
            name, args = self.calls[made]
            out: list[Any] = [ResponseFunctionToolCall(type="function_call", call_id=f"call-{made}", name=name,
                                                       arguments=json.dumps(args), id=f"fc-{made}", status="completed")]
        else:
            out = [ResponseOutputMessage(id="msg", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=" | ".join(outputs),
                                                                     annotations=[])])]
        return ModelResponse(output=out, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):  # type: ignore[override]
        raise NotImplementedError


def governed_agent(guard: WardenGuard, model: Model, ran: list) -> Agent:
    @function_tool
    def fs__read_text_file(path: str) -> str:
        """Read a text file."""
        ran.append(("read", path))
        return Path(path).read_text()

    @function_tool
    def fs__write_file(path: str, content: str) -> str:
        """Write a file."""
        ran.append(("write", path))
        Path(path).write_text(content)
        return "written"

    return Agent(name="files", model=model, tools=[guard.govern(fs__read_text_file), guard.govern(fs__write_file)])


def test_a_read_inside_runs_and_one_outside_is_rejected_without_running(checkpoint):
    (checkpoint.shared / "a.txt").write_text("inside")
    ran: list = []
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
        guard = WardenGuard(client, client.start_run(person="alice", agent="files"))
        model = Scripted([("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"}),
                          ("fs__read_text_file", {"path": "/etc/passwd"})])
        result = asyncio.run(Runner.run(governed_agent(guard, model, ran), "read them"))
    assert ran == [("read", f"{checkpoint.shared}/a.txt")]
    assert "inside" in result.final_output and "warden: subject_out_of_scope" in result.final_output
    codes = [r["code"] for r in checkpoint.records() if r["action"] == "tool_call"]
    assert codes == ["allowed", "subject_out_of_scope"]  # one decision per call, not one per hook


def test_a_write_interrupts_the_run_until_a_person_approves_at_the_checkpoint(checkpoint):
    target = checkpoint.shared / "w.txt"
    ran: list = []

    async def scenario(client: CheckpointClient, person: CheckpointClient) -> str:
        guard = WardenGuard(client, client.start_run(person="alice", agent="files"))
        agent = governed_agent(guard, Scripted([("fs__write_file", {"path": str(target), "content": "x"})]), ran)
        first = await Runner.run(agent, "write it")
        (item,) = first.interruptions
        assert not ran
        # approving in the program alone approves nothing
        state = first.to_state()
        state.approve(item)
        unapproved = await Runner.run(agent, state)
        assert not ran and "approval_required" in unapproved.final_output
        second = await Runner.run(governed_agent(guard, Scripted([("fs__write_file", {"path": str(target),
                                                                                      "content": "x"})]), ran), "again")
        (item,) = second.interruptions
        asked = guard.decision(item.call_id)
        assert asked is not None and asked.verdict == "REQUIRE_APPROVAL"
        guard.approved(item.call_id, person.approve(guard.run.run_id, asked.decision_id))
        state = second.to_state()
        state.approve(item)
        return (await Runner.run(agent, state)).final_output

    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client, \
            CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
        output = asyncio.run(scenario(client, person))
    assert ran == [("write", str(target))] and target.read_text() == "x" and "written" in output
    assert [r["approver"] for r in checkpoint.records() if r["action"] == "approval"] == ["alice"]
