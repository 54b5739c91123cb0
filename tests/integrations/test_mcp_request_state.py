"""A call that waits for a person, answered `input_required` with a `requestState` (MCP 2026-07-28):
the SDK's own client drives the rounds by hand against `warden mcp serve` and a real checkpoint.
Only a person's approval at the checkpoint lets the call run, once; every state that was altered,
forged, expired, taken by another client, stretched to another call or replayed is refused with its
code, on the record, and the upstream never sees the call."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the gateway's extra: pip install 'warden[mcp]'")

import anyio  # noqa: E402
import mcp_types as types  # noqa: E402

from warden.client import ApprovalInbox, CheckpointClient  # noqa: E402
from warden.client.runs import call_digest  # noqa: E402
from warden.mcp.request_state import KEY_FILE, RequestStates, load_key  # noqa: E402
from warden.mcp.settings import Client as Principal  # noqa: E402

from .conftest import ALICE_TOKEN  # noqa: E402
from .test_mcp_gateway import (  # noqa: E402, F401 - the fixtures
    ALICE_CLIENT_TOKEN,
    BOB_CLIENT_TOKEN,
    gateway,
    http_client,
    http_gateway,
    refused,
)

STDIO = Principal("stdio", "alice", "files")


async def ask(client, arguments: dict, **retry) -> types.CallToolResult | types.InputRequiredResult:
    return await client.session.call_tool("fs__write_file", arguments, allow_input_required=True, **retry)


def approve(checkpoint, inbox: Path, approval_id: str) -> None:
    """The person, with their own checkpoint credential, as `warden inbox approve` does."""
    box = ApprovalInbox(inbox)
    waiting = box.asked(approval_id)
    assert waiting is not None and waiting.tool == "fs__write_file"
    with CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
        box.put(person.approve(waiting.run_id, waiting.decision_id, "fine"))


def gateway_refusals(checkpoint) -> list[str]:
    return [r["code"] for r in checkpoint.records() if r["action"] == "gateway" and r["verdict"] == "DENY"]


def writes(checkpoint) -> list[str]:
    return [r["code"] for r in checkpoint.records() if r["action"] == "tool_call" and r["tool"] == "fs__write_file"]


def test_approved_by_a_person_the_call_runs_once_and_a_replay_is_spent(gateway, checkpoint):  # noqa: F811
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "approved text"}

    async def scenario():
        async with gateway() as client:
            first = await ask(client, call)
            assert isinstance(first, types.InputRequiredResult) and first.request_state
            warden = first.meta["warden"]
            assert warden["code"] == "approval_required" and warden["approval_id"] in warden["reason"]
            state = first.request_state
            pending = refused(await ask(client, call, request_state=state))
            assert (pending["code"], pending["approval_id"], pending["request_state"]) == (
                "approval_pending", warden["approval_id"], state)  # not spent: the same state again later
            assert not target.exists()
            approve(checkpoint, gateway.inbox, warden["approval_id"])
            done = await ask(client, call, request_state=state)
            assert isinstance(done, types.CallToolResult) and not done.is_error, done
            assert target.read_text() == "approved text"
            target.unlink()
            replay = refused(await ask(client, call, request_state=state))
            assert replay["code"] == "request_state_spent" and replay["decision_id"]
            legacy = await ask(client, call)  # the same call without the state is asked anew
            assert isinstance(legacy, types.InputRequiredResult)
            assert legacy.meta["warden"]["approval_id"] != warden["approval_id"]

    anyio.run(scenario)
    assert not target.exists()  # the replay never reached the upstream
    assert writes(checkpoint) == ["approval_required", "allowed", "approval_required"]
    assert [r["approver"] for r in checkpoint.records() if r["action"] == "approval"] == ["alice"]
    assert gateway_refusals(checkpoint) == ["approval_pending", "request_state_spent"]


def test_two_retries_at_once_with_one_approved_state_run_the_call_once(gateway, checkpoint):  # noqa: F811
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "once"}
    answers: list[str] = []

    async def scenario():
        async with gateway() as client:
            first = await ask(client, call)
            assert isinstance(first, types.InputRequiredResult)
            approve(checkpoint, gateway.inbox, first.meta["warden"]["approval_id"])

            async def retry() -> None:
                result = await ask(client, call, request_state=first.request_state)
                answers.append(refused(result)["code"] if result.is_error else "ran")

            async with anyio.create_task_group() as group:
                for _ in range(3):
                    group.start_soon(retry)

    anyio.run(scenario)
    assert sorted(answers) == ["ran", "request_state_spent", "request_state_spent"]
    assert writes(checkpoint) == ["approval_required", "allowed"]


def _tampered(state: str) -> list[tuple[str, str]]:
    body, mac = state.removeprefix("wrs1.").split(".")
    flipped = mac[:-2] + ("A" if mac[-2] != "A" else "B") + mac[-1]
    other_key = RequestStates(b"k" * 32)
    return [
        ("MAC altered", f"wrs1.{body}.{flipped}"),
        ("body altered, MAC kept", f"wrs1.{body[:-3]}{'x' if body[-3] != 'x' else 'y'}{body[-2:]}.{mac}"),
        ("truncated", state[: len(state) // 2]),
        ("another format", "v1." + state[5:]),
        ("padding added", state + "="),
        ("empty", ""),
        ("under another key", other_key.issue(STDIO, "run", "approval", "fs", "call")),
    ]


def test_forged_expired_and_stretched_states_are_refused_on_the_record(gateway, checkpoint):  # noqa: F811
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "approved text"}
    (checkpoint.shared / "notes.txt").write_text("still serving\n")
    seen: list[tuple[str, str]] = []

    async def scenario():
        async with gateway() as client:
            first = await ask(client, call)
            assert isinstance(first, types.InputRequiredResult)
            state, approval_id = first.request_state, first.meta["warden"]["approval_id"]
            approve(checkpoint, gateway.inbox, approval_id)  # approved: only a sound state may use it
            for what, forged in _tampered(state):
                seen.append((what, refused(await ask(client, call, request_state=forged))["code"]))
            # minted with the gateway's own key (the operator's, read from its state folder), past expiry
            key = load_key(gateway.inbox.parent)
            run_id = ApprovalInbox(gateway.inbox).peek(approval_id).run_id
            digest = call_digest("fs__write_file", call)
            old = RequestStates(key, clock=lambda: 0.0).issue(STDIO, run_id, approval_id, "fs", digest)
            seen.append(("expired", refused(await ask(client, call, request_state=old))["code"]))
            earlier_run = RequestStates(key).issue(STDIO, "an-earlier-run", approval_id, "fs", digest)
            seen.append(("earlier run", refused(await ask(client, call, request_state=earlier_run))["code"]))
            other_upstream = RequestStates(key).issue(STDIO, run_id, approval_id, "gh", digest)
            seen.append(("other upstream", refused(await ask(client, call, request_state=other_upstream))["code"]))
            changed = {**call, "content": "something else"}
            seen.append(("changed arguments", refused(await ask(client, changed, request_state=state))["code"]))
            extra = {**call, "mode": "append"}
            seen.append(("an added argument", refused(await ask(client, extra, request_state=state))["code"]))
            read = await client.session.call_tool("fs__read_text_file", {"path": str(target)}, request_state=state)
            seen.append(("another tool", refused(read)["code"]))
            assert not target.exists()
            # the gateway keeps serving, and the sound state was not spent by any of it
            notes = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/notes.txt"})
            assert not notes.is_error and "still serving" in notes.content[0].text
            done = await ask(client, call, request_state=state)
            assert isinstance(done, types.CallToolResult) and not done.is_error, done

    anyio.run(scenario)
    assert dict(seen) == {
        "MAC altered": "request_state_invalid", "body altered, MAC kept": "request_state_invalid",
        "truncated": "request_state_invalid", "another format": "request_state_invalid",
        "padding added": "request_state_invalid", "empty": "request_state_invalid",
        "under another key": "request_state_invalid", "expired": "request_state_expired",
        "earlier run": "request_state_expired", "other upstream": "request_state_other_call",
        "changed arguments": "request_state_other_call", "an added argument": "request_state_other_call",
        "another tool": "request_state_other_call"}
    assert gateway_refusals(checkpoint) == [code for _what, code in seen]  # each one on the record
    assert target.read_text() == "approved text"
    assert writes(checkpoint) == ["approval_required", "allowed"]  # no refused state reached a Check
    key_file = gateway.inbox.parent / KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600


def test_an_answer_from_the_client_is_never_an_approval(gateway, checkpoint):  # noqa: F811
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "text"}
    accepted = {"approval": types.ElicitResult(action="accept", content={"approved": True})}
    codes: list[str] = []

    async def scenario():
        async with gateway() as client:
            first = await ask(client, call)
            assert isinstance(first, types.InputRequiredResult)
            state = first.request_state
            codes.append(refused(await ask(client, call, request_state=state, input_responses=accepted))["code"])
            codes.append(refused(await ask(client, call, input_responses=accepted))["code"])
            codes.append(refused(await ask(client, call, request_state=state,
                                           meta={"warden/approved": True}))["code"])
            # nobody approved: the sound state still only waits
            codes.append(refused(await ask(client, call, request_state=state))["code"])

    anyio.run(scenario)
    assert codes == ["approval_not_from_client"] * 3 + ["approval_pending"]
    assert gateway_refusals(checkpoint) == codes
    assert not target.exists()
    assert writes(checkpoint) == ["approval_required"]


def test_another_clients_state_is_refused(http_gateway, checkpoint):  # noqa: F811
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "alice's"}

    async def scenario():
        async with http_client(http_gateway, ALICE_CLIENT_TOKEN) as alice:
            first = await ask(alice, call)
            assert isinstance(first, types.InputRequiredResult)
            state = first.request_state
        async with http_client(http_gateway, BOB_CLIENT_TOKEN) as bob:
            stolen = refused(await ask(bob, call, request_state=state))
            assert stolen["code"] == "request_state_other_principal" and stolen["decision_id"]
            assert not (await bob.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"})).is_error
        async with http_client(http_gateway, ALICE_CLIENT_TOKEN) as alice:  # alice's own state still waits
            assert refused(await ask(alice, call, request_state=state))["code"] == "approval_pending"

    anyio.run(scenario)
    assert not target.exists()
    refusals = [(r["accountable_person"], r["code"]) for r in checkpoint.records()
                if r["action"] == "gateway" and r["verdict"] == "DENY"]
    assert refusals == [("bob", "request_state_other_principal"), ("alice", "approval_pending")]


def test_the_state_key_is_made_private_and_a_key_others_can_read_is_refused(tmp_path):
    from warden.private import UntrustedFileError

    folder = tmp_path / "state"
    key = load_key(folder)
    assert len(key) == 32 and (folder / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert load_key(folder) == key  # the same key after a restart: states outlive no run, though (run id)
    (folder / KEY_FILE).chmod(0o644)
    with pytest.raises(UntrustedFileError):
        load_key(folder)


def test_a_client_before_2026_07_28_gets_the_approval_id_as_before(gateway, checkpoint):  # noqa: F811
    import sys

    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from .conftest import REPO

    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "legacy"}
    params = StdioServerParameters(command=sys.executable, cwd=str(REPO), env={"PYTHONPATH": str(REPO)},
                                   args=["-m", "warden.cli", "mcp", "serve", "--settings", str(gateway.settings())])

    async def scenario():
        async with Client(params, cache=None, mode="legacy") as client:
            assert client.protocol_version == "2025-11-25"
            asked = refused(await client.call_tool("fs__write_file", call))
            assert asked["code"] == "approval_required" and "request_state" not in asked
            approve(checkpoint, gateway.inbox, asked["approval_id"])
            assert not (await client.call_tool("fs__write_file", call)).is_error
            # an input response sent the old way is the client's own answer all the same
            answer = {"approval": types.ElicitResult(action="accept", content={"approved": True})}
            claimed = await client.session.call_tool("fs__write_file", call, input_responses=answer)
            assert refused(claimed)["code"] == "approval_not_from_client"

    anyio.run(scenario)
    assert target.read_text() == "legacy"
    assert writes(checkpoint) == ["approval_required", "allowed"]  # the claimed answer reached no Check
