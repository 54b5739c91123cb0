"""Pydantic AI, the real package, driven by its own FunctionModel: every tool call is checked with
the arguments that will run, and an approval is a person's, at the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from warden.client import CheckpointClient  # noqa: E402
from warden.hooks.pydantic_ai import WardenTools, approval_metadata  # noqa: E402

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN  # noqa: E402


def scripted(calls: list[tuple[str, dict]]) -> FunctionModel:
    """A model that makes `calls` one per turn, then answers with what the tools returned."""

    def respond(messages, _info) -> ModelResponse:
        returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
        if len(returns) < len(calls):
            name, args = calls[len(returns)]
            return ModelResponse(parts=[ToolCallPart(tool_name=name, args=args, tool_call_id=f"call-{len(returns)}")])
        return ModelResponse(parts=[TextPart(" | ".join(str(p.content) for p in returns))])

    return FunctionModel(respond)


def agent_with(checkpoint_client: CheckpointClient, run, model: FunctionModel, ran: list) -> Agent:
    agent = Agent(model, capabilities=[WardenTools(checkpoint_client, run)],
                  output_type=[str, DeferredToolRequests])

    @agent.tool_plain
    def fs__read_text_file(path: str) -> str:
        ran.append(("read", path))
        return Path(path).read_text()

    @agent.tool_plain
    def fs__write_file(path: str, content: str) -> str:
        ran.append(("write", path))
        Path(path).write_text(content)
        return "written"

    return agent


def test_a_read_inside_runs_and_one_outside_is_refused_without_running(checkpoint):
    (checkpoint.shared / "a.txt").write_text("inside")
    ran: list = []
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client:
        run = client.start_run(person="alice", agent="files")
        model = scripted([("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"}),
                          ("fs__read_text_file", {"path": "/etc/passwd"})])
        output = agent_with(client, run, model, ran).run_sync("read them").output
    assert ran == [("read", f"{checkpoint.shared}/a.txt")]
    assert "inside" in output and "warden: subject_out_of_scope" in output


def test_a_write_is_deferred_until_a_person_approves_at_the_checkpoint(checkpoint):
    target = checkpoint.shared / "w.txt"
    ran: list = []
    with CheckpointClient(checkpoint.address, token=GATEWAY_TOKEN) as client, \
            CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
        run = client.start_run(person="alice", agent="files")
        agent = agent_with(client, run, scripted([("fs__write_file", {"path": str(target), "content": "x"})]), ran)
        first = agent.run_sync("write it")
        assert isinstance(first.output, DeferredToolRequests) and not ran
        (asked,) = first.output.approvals
        decision_id = first.output.metadata[asked.tool_call_id]["warden_decision_id"]
        # approving in the program alone is no approval: the checkpoint asks for a person again
        unapproved = agent.run_sync(message_history=first.all_messages(),
                                    deferred_tool_results=DeferredToolResults(approvals={asked.tool_call_id: True}))
        assert not ran and "approval_required" in str(unapproved.output)
        outcome = person.approve(run.run_id, decision_id)
        approved = agent.run_sync(message_history=first.all_messages(), deferred_tool_results=DeferredToolResults(
            approvals={asked.tool_call_id: True}, metadata={asked.tool_call_id: approval_metadata(outcome)}))
    assert ran == [("write", str(target))] and target.read_text() == "x" and "written" in str(approved.output)
    approvals = [r for r in checkpoint.records() if r["action"] == "approval"]
    assert [r["approver"] for r in approvals] == ["alice"]
