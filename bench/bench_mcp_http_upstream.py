"""What a streamable HTTP upstream costs per tools/call: the same reads of the same HTTP upstream
straight from the SDK's client (one kept connection, and one connection per call as the gateway
makes them), and through `warden mcp serve` (its client over stdio), beside the gateway in front
of the stdio upstream, in one run.

    .venv/bin/python -m bench.bench_mcp_http_upstream [--calls N]

The HTTP upstream is the test's SDK server (tests/integrations/http_upstream.py) on loopback,
stateless; through the gateway each call is also a Check() on a real checkpoint on loopback.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_mcp_gateway import TOKEN, UPSTREAM, _percentiles, _timed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HTTP_UPSTREAM = ROOT / "tests" / "integrations" / "http_upstream.py"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _PerCall:
    """The gateway's way: a new SDK client connection for each call (its HTTP connections pooled)."""

    def __init__(self, url: str) -> None:
        from warden.mcp.http_upstream import HttpUpstream
        from warden.mcp.settings import Upstream

        self.upstream = HttpUpstream(Upstream("fs", "", url=url), max_event_bytes=1 << 22)

    async def call_tool(self, name: str, arguments: dict):  # type: ignore[no-untyped-def]
        return await self.upstream.call(name, arguments)


def main(argv: list[str]) -> None:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from demo.mcp_world import start_checkpoint

    parser = argparse.ArgumentParser(prog="bench_mcp_http_upstream")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        shared = tmp / "shared"
        shared.mkdir()
        (tmp / "upstream").mkdir()
        for i in range(args.calls + 5):
            (shared / f"f{i}.txt").write_text(f"line {i}\n")
        server, address = start_checkpoint(tmp, shared, {TOKEN: "mcp-gateway"})
        port = _port()
        upstream = subprocess.Popen([sys.executable, str(HTTP_UPSTREAM), str(port), str(tmp / "upstream")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        token = tmp / "gateway.token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        head = f'checkpoint = "{address}"\ntoken_file = "{token}"\nperson = "alice"\nagent = "files"\n'
        # a state folder each: the two upstreams describe their tools differently, and pins tell
        (tmp / "http.toml").write_text(head + f'state = "{tmp / "state-http"}"\n\n[upstreams.fs]\nurl = "{url}"\n')
        (tmp / "stdio.toml").write_text(head + f'state = "{tmp / "state-stdio"}"\n\n[upstreams.fs]\ncommand = {json.dumps(sys.executable)}\n'
                                        f'args = [{json.dumps(str(UPSTREAM))}]\n')
        env = {"PYTHONPATH": str(ROOT)}

        def gateway(settings: str) -> StdioServerParameters:
            return StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env,
                                         args=["-m", "warden.cli", "mcp", "serve", "--settings", str(tmp / settings)])

        async def measure() -> dict[str, list[float]]:
            out = {}
            async with Client(url, cache=None) as kept:
                out["HTTP upstream, kept connection"] = await _timed(kept, args.calls, shared, "read_text_file")
            out["HTTP upstream, connection per call"] = await _timed(_PerCall(url), args.calls, shared,
                                                                     "read_text_file")
            for label, settings in (("warden mcp -> HTTP upstream", "http.toml"),
                                    ("warden mcp -> stdio upstream", "stdio.toml")):
                async with Client(gateway(settings), cache=None) as governed:
                    out[label] = await _timed(governed, args.calls, shared, "fs__read_text_file")
            return out

        try:
            results = anyio.run(measure)
        finally:
            upstream.terminate()
            upstream.wait(timeout=10)
            server.stop(grace=0.5)
    print(f"tools/call, {args.calls} calls each (ms)")
    for label, samples in results.items():
        p50, p99 = _percentiles(samples)
        print(f"  {label:36s} p50 {p50:7.2f}  p99 {p99:7.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
