"""`warden mcp serve`, the real command over stdio, driven by the SDK's own client, fronting an
upstream written with the Python SDK, against a real checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp", reason="the gateway's extra: pip install 'warden[mcp]'")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from warden.client import ApprovalInbox, CheckpointClient  # noqa: E402

from .conftest import ALICE_TOKEN, GATEWAY_TOKEN, REPO  # noqa: E402

UPSTREAM = Path(__file__).with_name("fs_upstream.py")
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"


@pytest.fixture
def gateway(checkpoint, tmp_path: Path):
    token = tmp_path / "gateway.token"
    token.write_text(GATEWAY_TOKEN + "\n")
    token.chmod(0o600)
    state = tmp_path / "state"

    def settings(checkpoint_address: str = checkpoint.address, variant: str = "",
                 upstream: tuple[str, ...] = (sys.executable, str(UPSTREAM)), max_result_bytes: int = 1 << 20) -> Path:
        path = tmp_path / "mcp.toml"
        path.write_text(f'checkpoint = "{checkpoint_address}"\ntoken_file = "{token}"\nperson = "alice"\n'
                        f'agent = "files"\nstate = "{state}"\ntimeout = 3\nmax_result_bytes = {max_result_bytes}\n'
                        '\n[upstreams.fs]\n'
                        f'command = {json.dumps(upstream[0])}\nargs = {json.dumps(list(upstream[1:]))}\n'
                        f'env = {{UPSTREAM_VARIANT = "{variant}"}}\n')
        return path

    def session(**kwargs: Any) -> Client:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "warden.cli", "mcp", "serve", "--settings", str(settings(**kwargs))],
                                       env={"PYTHONPATH": str(REPO)}, cwd=str(REPO))
        return Client(params, cache=None)

    session.inbox = state / "approvals.db"  # type: ignore[attr-defined]
    session.settings = settings  # type: ignore[attr-defined]
    return session


def text(result) -> str:
    return "\n".join(block.text for block in result.content)


def refused(result) -> dict:
    assert result.is_error, text(result)
    return result.structured_content["warden"]


def tool_calls(checkpoint) -> list[tuple[str, str]]:
    return [(r["tool"], r["code"]) for r in checkpoint.records() if r["action"] == "tool_call"]


def test_the_client_sees_only_what_the_policy_allows_and_each_call_is_decided(gateway, checkpoint):
    (checkpoint.shared / "notes.txt").write_text("meeting at ten\n")

    async def scenario():
        async with gateway() as client:
            listed = sorted(t.name for t in (await client.list_tools()).tools)
            assert listed == ["fs__list_directory", "fs__read_text_file", "fs__write_file"]  # no delete_file
            inside = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/notes.txt"})
            assert not inside.is_error and "meeting at ten" in text(inside)
            outside = await client.call_tool("fs__read_text_file", {"path": "/etc/passwd"})
            assert refused(outside)["code"] == "subject_out_of_scope"
            never_shown = await client.call_tool("fs__delete_file", {"path": f"{checkpoint.shared}/notes.txt"})
            assert refused(never_shown)["code"] == "unknown_tool"  # the checkpoint's: no policy names it
            bad = await client.call_tool("fs__read_text_file", {"path": 42})
            assert refused(bad)["code"] == "invalid_arguments"

    anyio.run(scenario)
    assert (checkpoint.shared / "notes.txt").exists()
    assert tool_calls(checkpoint)[:3] == [("fs__read_text_file", "allowed"), ("fs__read_text_file", "subject_out_of_scope"),
                                          ("fs__delete_file", "unknown_tool")]  # the call never shown is recorded


def test_a_write_waits_for_a_person_and_runs_once_approved(gateway, checkpoint):
    target = checkpoint.shared / "out.txt"
    call = {"path": str(target), "content": "approved text"}

    async def scenario():
        async with gateway() as client:
            # input_required (2026-07-28): the SDK's client retries at once with the requestState
            asked = refused(await client.call_tool("fs__write_file", call))
            assert asked["code"] == "approval_pending" and asked["approval_id"] and asked["request_state"]
            assert not target.exists()  # the upstream never saw it
            pending = refused(await client.call_tool("fs__write_file", call))
            assert pending["code"] == "approval_pending"
            inbox = ApprovalInbox(gateway.inbox)
            with CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
                waiting = inbox.asked(asked["approval_id"])
                assert waiting is not None and waiting.tool == "fs__write_file"
                inbox.put(person.approve(waiting.run_id, waiting.decision_id, "fine"))
            done = await client.call_tool("fs__write_file", call)
            assert not done.is_error, text(done)
            asked_again = refused(await client.call_tool("fs__write_file", call))
            assert asked_again["code"] == "approval_pending"  # an approval is spent once: asked anew
            assert asked_again["approval_id"] != asked["approval_id"]

    anyio.run(scenario)
    assert target.read_text() == "approved text"
    assert [r["approver"] for r in checkpoint.records() if r["action"] == "approval"] == ["alice"]


def test_a_secret_in_a_result_is_scrubbed(gateway, checkpoint):
    (checkpoint.shared / "config.env").write_text(f"AWS_ACCESS_KEY_ID={AWS_KEY}\nregion=eu-west-1\n")

    async def scenario():
        async with gateway() as client:
            result = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/config.env"})
            assert not result.is_error
            assert AWS_KEY not in json.dumps(result.model_dump(mode="json")) and "[masked:" in text(result)
            assert "region=eu-west-1" in text(result)

    anyio.run(scenario)


def test_an_upstream_tool_that_changed_after_admission_is_refused(gateway, checkpoint):
    async def admitted():
        async with gateway() as client:
            assert "fs__read_text_file" in {t.name for t in (await client.list_tools()).tools}

    async def changed():
        async with gateway(variant="changed") as client:
            assert "fs__read_text_file" not in {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/x"})
            assert refused(result)["code"] == "upstream_tool_changed"
            # the tools that did not change are still served
            assert not (await client.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"})).is_error

    async def accepted():
        async with gateway(variant="changed") as client:
            assert "fs__read_text_file" in {t.name for t in (await client.list_tools()).tools}

    anyio.run(admitted)
    anyio.run(changed)
    # a person reads the change and accepts it: the new definition is pinned
    settings = gateway.settings(variant="changed")
    env = {**os.environ, "PYTHONPATH": str(REPO), "UPSTREAM_VARIANT": "changed"}
    listed = subprocess.run([sys.executable, "-m", "warden.cli", "mcp", "pins", "list", "--settings", str(settings)],
                            capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert "fs__read_text_file  CHANGED" in listed.stdout and "fs__write_file  pinned" in listed.stdout, listed.stderr
    done = subprocess.run([sys.executable, "-m", "warden.cli", "mcp", "pins", "accept", "fs__read_text_file",
                           "--settings", str(settings)], capture_output=True, text=True, timeout=60, cwd=REPO, env=env)
    assert done.returncode == 0, done.stderr
    anyio.run(accepted)


def test_a_result_larger_than_the_gateway_passes_on_is_refused(gateway, checkpoint):
    (checkpoint.shared / "big.txt").write_text("x" * 50_000)
    (checkpoint.shared / "small.txt").write_text("small")

    async def scenario():
        async with gateway(max_result_bytes=10_000) as client:
            big = refused(await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/big.txt"}))
            assert big["code"] == "result_too_large"
            small = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/small.txt"})
            assert not small.is_error  # the gateway goes on serving

    anyio.run(scenario)


def test_a_halt_ends_the_runs_calls(gateway, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")

    async def scenario():
        async with gateway() as client:
            same = {"path": f"{checkpoint.shared}/a.txt"}
            for _ in range(3):  # acme's repetition ceiling: the fourth identical call halts
                assert not (await client.call_tool("fs__read_text_file", same)).is_error
            halted = refused(await client.call_tool("fs__read_text_file", same))
            assert (halted["verdict"], halted["code"]) == ("HALT", "breaker_repetition")
            other = refused(await client.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"}))
            assert other["code"] == "run_ended"

    anyio.run(scenario)
    assert tool_calls(checkpoint)[-2:] == [("fs__read_text_file", "breaker_repetition"), ("fs__list_directory", "run_ended")]


def test_calls_sent_at_once_each_count_against_the_run(gateway, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")
    codes: list[str] = []

    async def one(client: Client) -> None:
        result = await client.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"})
        codes.append(result.structured_content["warden"]["code"] if result.is_error else "allowed")

    async def scenario():
        async with gateway() as client:
            await client.list_tools()
            async with anyio.create_task_group() as group:
                for _ in range(4):  # acme's repetition ceiling is 3
                    group.start_soon(one, client)

    anyio.run(scenario)
    assert sorted(codes) == ["allowed", "allowed", "allowed", "breaker_repetition"]


def test_with_the_checkpoint_unreachable_every_call_is_a_tool_error(gateway, checkpoint):
    async def scenario():
        async with gateway(checkpoint_address="127.0.0.1:1") as client:
            result = await client.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"})
            assert refused(result)["code"] == "checkpoint_unavailable"

    anyio.run(scenario)


REFERENCE = REPO / "examples" / "mcp" / "filesystem-server"
REFERENCE_MAIN = REFERENCE / "node_modules" / "@modelcontextprotocol" / "server-filesystem" / "dist" / "index.js"


@pytest.fixture
def reference_server() -> str:
    """The npm reference filesystem server (installed with `npm install` in examples/mcp/filesystem-server)."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    if not REFERENCE_MAIN.exists():
        npm = shutil.which("npm")
        done = npm and subprocess.run([npm, "install", "--no-audit", "--no-fund"], cwd=REFERENCE,
                                      capture_output=True, timeout=300)
        if not done or done.returncode != 0:
            pytest.skip("@modelcontextprotocol/server-filesystem is not installed and `npm install` failed")
    return node


def test_the_reference_filesystem_server_behind_the_gateway(gateway, checkpoint, reference_server):
    shared = checkpoint.shared.resolve()
    (shared / "notes.txt").write_text(f"token: {AWS_KEY}\n")
    target = shared / "new.txt"

    async def scenario():
        # the server itself may reach / : the policy's scope is what fences it
        async with gateway(upstream=(reference_server, str(REFERENCE_MAIN), "/")) as client:
            listed = {t.name for t in (await client.list_tools()).tools}
            assert listed == {"fs__list_directory", "fs__read_text_file", "fs__write_file"}
            inside = await client.call_tool("fs__read_text_file", {"path": f"{shared}/notes.txt"})
            assert not inside.is_error and "token:" in text(inside) and AWS_KEY not in text(inside)
            outside = await client.call_tool("fs__read_text_file", {"path": "/etc/hostname"})
            assert refused(outside)["code"] == "subject_out_of_scope"
            asked = refused(await client.call_tool("fs__write_file", {"path": str(target), "content": "hi"}))
            assert asked["code"] == "approval_pending"  # input_required, retried at once by the SDK's client
            inbox = ApprovalInbox(gateway.inbox)
            with CheckpointClient(checkpoint.address, token=ALICE_TOKEN) as person:
                inbox.put(person.approve(inbox.asked(asked["approval_id"]).run_id, asked["approval_id"]))
            assert not (await client.call_tool("fs__write_file", {"path": str(target), "content": "hi"})).is_error

    anyio.run(scenario)
    assert target.read_text() == "hi"


ALICE_CLIENT_TOKEN = "alice-laptop-token-0123456789abcdef"
BOB_CLIENT_TOKEN = "bob-box-token-0123456789abcdef"


@pytest.fixture
def http_gateway(checkpoint, tmp_path: Path):
    token = tmp_path / "gateway.token"
    token.write_text(GATEWAY_TOKEN + "\n")
    clients = tmp_path / "clients.tokens"
    clients.write_text(f"alice-laptop {ALICE_CLIENT_TOKEN}\nbob-box {BOB_CLIENT_TOKEN}\n")
    for f in (token, clients):
        f.chmod(0o600)
    settings = tmp_path / "mcp-http.toml"
    settings.write_text(f'checkpoint = "{checkpoint.address}"\ntoken_file = "{token}"\nstate = "{tmp_path / "state"}"\n'
                        f'clients_file = "{clients}"\n\n[clients.alice-laptop]\nperson = "alice"\nagent = "files"\n\n'
                        f'[clients.bob-box]\nperson = "bob"\nagent = "files"\n\n[upstreams.fs]\n'
                        f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(UPSTREAM))}]\n')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "warden.cli", "mcp", "serve", "--http", f"127.0.0.1:{port}",
                             "--settings", str(settings)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}/mcp"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.1)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def http_client(url: str, token: str | None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers)), cache=None)


def test_over_http_each_client_is_decided_for_its_own_person_by_its_token(http_gateway, checkpoint):
    (checkpoint.shared / "notes.txt").write_text("hello\n")

    async def scenario():
        async with http_client(http_gateway, ALICE_CLIENT_TOKEN) as alice:
            assert len((await alice.list_tools()).tools) == 3
            read = await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/notes.txt"})
            assert not read.is_error and "hello" in text(read)
        async with http_client(http_gateway, BOB_CLIENT_TOKEN) as bob:
            await bob.call_tool("fs__list_directory", {"path": f"{checkpoint.shared}/"})
        async with httpx2.AsyncClient() as raw:
            for headers in ({}, {"Authorization": "Bearer not-a-token-of-the-gateway"}):
                answer = await raw.post(http_gateway, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                        headers={**headers, "Accept": "application/json, text/event-stream"})
                assert answer.status_code == 401

    anyio.run(scenario)
    people = {(r["tool"], r["accountable_person"]) for r in checkpoint.records() if r["action"] == "tool_call"}
    assert people == {("fs__read_text_file", "alice"), ("fs__list_directory", "bob")}
