"""`warden mcp serve` (the real command, over streamable HTTP) fronting a streamable HTTP upstream
written with the Python SDK on a loopback port (http_upstream.py), against a real checkpoint."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the gateway's extra: pip install 'warden[mcp]'")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from .conftest import GATEWAY_TOKEN, REPO  # noqa: E402

UPSTREAM = Path(__file__).with_name("http_upstream.py")
CLIENT_TOKEN = "gateway-client-alice-0123456789abcdef"
UPSTREAM_TOKEN = "upstream-token-fedcba9876543210"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


class HttpUpstream:
    """The upstream process: started, stopped and started again on the same port."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(UPSTREAM), str(self.port), str(self.state)], cwd=REPO,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(self.port, self.proc)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def calls(self) -> list[dict]:
        path = self.state / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def authorizations(self) -> list[str | None]:
        return [json.loads(line) for line in (self.state / "auth.jsonl").read_text().splitlines()]


@pytest.fixture
def upstream(tmp_path: Path):
    state = tmp_path / "upstream-state"
    state.mkdir()
    up = HttpUpstream(state)
    up.start()
    yield up
    up.stop()


@pytest.fixture
def silent():
    """A port that accepts connections and never answers: an upstream that hangs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"http://127.0.0.1:{s.getsockname()[1]}/mcp"


@pytest.fixture
def http_gateway(checkpoint, upstream, silent, tmp_path: Path):
    procs: list[subprocess.Popen] = []

    def start(max_result_bytes: int = 1 << 20) -> str:
        files = {"gateway.token": GATEWAY_TOKEN, "clients.tokens": f"alice-laptop {CLIENT_TOKEN}",
                 "upstream.token": UPSTREAM_TOKEN}
        for name, content in files.items():
            (tmp_path / name).write_text(content + "\n")
            (tmp_path / name).chmod(0o600)
        settings = tmp_path / "mcp-http.toml"
        settings.write_text(
            f'checkpoint = "{checkpoint.address}"\ntoken_file = "{tmp_path / "gateway.token"}"\n'
            f'state = "{tmp_path / "state"}"\nclients_file = "{tmp_path / "clients.tokens"}"\n'
            f'max_result_bytes = {max_result_bytes}\n\n'
            '[clients.alice-laptop]\nperson = "alice"\nagent = "files"\n\n'
            f'[upstreams.fs]\nurl = "{upstream.url}"\ntoken_file = "{tmp_path / "upstream.token"}"\ntimeout = 5\n\n'
            f'[upstreams.hangs]\nurl = "{silent}"\ntimeout = 1\n')
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "warden.cli", "mcp", "serve", "--http", f"127.0.0.1:{port}",
                                 "--settings", str(settings)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(proc)
        wait_for(port, proc)
        return f"http://127.0.0.1:{port}/mcp"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def client(url: str) -> Client:
    headers = {"Authorization": f"Bearer {CLIENT_TOKEN}"}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=30)),
                  cache=None)


def text(result) -> str:
    return "\n".join(block.text for block in result.content)


def refused(result) -> dict:
    assert result.is_error, text(result)
    return result.structured_content["warden"]


def gateway_refusals(checkpoint) -> list[tuple[str, str, str]]:
    return [(r["tool"], r["code"], r["arguments"]["details"]["upstream"]) for r in checkpoint.records()
            if r["action"] == "gateway" and r["arguments"]["details"].get("event") == "refused"]


def test_an_allowed_call_reaches_the_upstream_and_a_denied_one_never_does(http_gateway, upstream, checkpoint):
    (checkpoint.shared / "notes.txt").write_text("meeting at ten\n")
    url = http_gateway()

    async def scenario():
        async with client(url) as alice:
            started = time.monotonic()
            listed = sorted(t.name for t in (await alice.list_tools()).tools)
            # the upstream that never answers costs its own timeout, not the listing
            assert time.monotonic() - started < 4
            assert listed == ["fs__list_directory", "fs__read_text_file", "fs__write_file"]
            read = await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/notes.txt"})
            assert not read.is_error and "meeting at ten" in text(read)
            for path in ("/etc/passwd", f"{checkpoint.shared}/../../etc/passwd"):
                denied = refused(await alice.call_tool("fs__read_text_file", {"path": path}))
                assert denied["verdict"] == "DENY"

    anyio.run(scenario)
    assert upstream.calls() == [{"tool": "read_text_file", "arguments": {"path": f"{checkpoint.shared}/notes.txt"}}]
    calls = [(r["tool"], r["verdict"]) for r in checkpoint.records() if r["action"] == "tool_call"]
    assert calls == [("fs__read_text_file", "ALLOW"), ("fs__read_text_file", "DENY"), ("fs__read_text_file", "DENY")]


def test_the_upstream_sees_its_own_token_and_never_the_clients(http_gateway, upstream, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")
    url = http_gateway()

    async def scenario():
        async with client(url) as alice:
            await alice.list_tools()
            assert not (await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"})).is_error

    anyio.run(scenario)
    seen = upstream.authorizations()
    assert len(seen) >= 2 and set(seen) == {f"Bearer {UPSTREAM_TOKEN}"}
    raw = (upstream.state / "auth.jsonl").read_text()
    assert CLIENT_TOKEN not in raw and GATEWAY_TOKEN not in raw


def test_a_rotated_token_is_used_and_an_unreadable_one_sends_nothing(http_gateway, upstream, checkpoint, tmp_path):
    (checkpoint.shared / "a.txt").write_text("a")
    url = http_gateway()
    token = tmp_path / "upstream.token"

    async def scenario():
        async with client(url) as alice:
            await alice.list_tools()
            token.write_text("rotated-token-0123456789\n")
            assert not (await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"})).is_error
            before = len(upstream.authorizations())
            token.chmod(0o666)  # another user could have written it: not a credential to send
            result = refused(await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"}))
            assert result["code"] == "upstream_unavailable"
            assert len(upstream.authorizations()) == before  # no request went out without its token

    anyio.run(scenario)
    assert upstream.authorizations()[-1] == "Bearer rotated-token-0123456789"
    assert len(upstream.calls()) == 1


def test_an_unreachable_upstream_is_a_recorded_tool_error_and_the_gateway_recovers(http_gateway, upstream, checkpoint):
    (checkpoint.shared / "a.txt").write_text("back again")
    url = http_gateway()
    call = ("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"})

    async def scenario():
        async with client(url) as alice:
            await alice.list_tools()
            upstream.stop()
            down = refused(await alice.call_tool(*call))
            assert down["code"] == "upstream_unavailable" and down["decision_id"]
            assert "'fs'" in down["reason"]
            upstream.start()
            again = await alice.call_tool(*call)
            assert not again.is_error and "back again" in text(again)

    anyio.run(scenario)
    assert gateway_refusals(checkpoint) == [("fs__read_text_file", "upstream_unavailable", "fs")]
    assert len(upstream.calls()) == 1


def test_an_upstream_that_never_answers_is_unavailable_within_its_timeout(http_gateway, upstream, checkpoint,
                                                                           silent):
    (checkpoint.shared / "a.txt").write_text("a")
    url = http_gateway()

    async def scenario():
        async with client(url) as alice:
            await alice.list_tools()
            upstream.stop()
            with socket.socket() as hang:  # the upstream's port answers no more: it hangs
                hang.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                hang.bind(("127.0.0.1", upstream.port))
                hang.listen(16)
                started = time.monotonic()
                result = refused(await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt"}))
                assert result["code"] == "upstream_unavailable" and "no answer within 5s" in result["reason"]
                assert 4 < time.monotonic() - started < 20

    anyio.run(scenario)


def test_an_upstream_that_changed_a_tool_after_admission_is_refused(http_gateway, upstream, checkpoint):
    (checkpoint.shared / "a.txt").write_text("a")
    url = http_gateway()

    async def scenario():
        async with client(url) as alice:
            assert "fs__read_text_file" in {t.name for t in (await alice.list_tools()).tools}
            (upstream.state / "variant").write_text("changed\n")
            shown = {t.name for t in (await alice.list_tools()).tools}
            assert shown == {"fs__list_directory", "fs__write_file"}
            result = refused(await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/a.txt",
                                                                          "mode": "x"}))
            assert result["code"] == "upstream_tool_changed"

    anyio.run(scenario)
    assert upstream.calls() == []
    assert gateway_refusals(checkpoint) == [("fs__read_text_file", "upstream_tool_changed", "fs")]


def test_a_result_larger_than_the_limit_is_refused(http_gateway, upstream, checkpoint):
    (checkpoint.shared / "big.txt").write_text("x" * 20_000)
    (checkpoint.shared / "huge.txt").write_text("y" * 400_000)  # beyond what one SSE event may hold
    (checkpoint.shared / "small.txt").write_text("fits")
    url = http_gateway(max_result_bytes=10_000)

    async def scenario():
        async with client(url) as alice:
            await alice.list_tools()
            big = refused(await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/big.txt"}))
            assert big["code"] == "result_too_large" and "x" * 100 not in json.dumps(big)
            huge = refused(await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/huge.txt"}))
            assert huge["code"] in ("result_too_large", "upstream_unavailable") and "y" * 100 not in json.dumps(huge)
            small = await alice.call_tool("fs__read_text_file", {"path": f"{checkpoint.shared}/small.txt"})
            assert text(small) == "fits"

    anyio.run(scenario)
    assert [c for _t, c, _u in gateway_refusals(checkpoint)][0] == "result_too_large"
