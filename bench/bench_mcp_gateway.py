"""The MCP gateway's added latency per tools/call: the same reads through `warden mcp serve` and
straight to the upstream, side by side in one run, both with the SDK's client over stdio.

    .venv/bin/python -m bench.bench_mcp_gateway [--calls N]

Through the gateway each call is a Check() on a real checkpoint on loopback (decided and
committed to its log before the answer), the upstream call, and the result scrubbed. The upstream
is the Python-SDK filesystem server of the gateway's tests; each call reads another file, so no
breaker trips.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM = ROOT / "tests" / "integrations" / "fs_upstream.py"
TOKEN = "bench-gateway-token-0123456789abcdef"


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _timed(client, calls: int, path: Path, name: str) -> list[float]:  # type: ignore[no-untyped-def]
    took = []
    for i in range(calls + 5):
        started = time.perf_counter()
        result = await client.call_tool(name, {"path": f"{path}/f{i}.txt"})
        elapsed = time.perf_counter() - started
        assert not result.is_error, result
        if i >= 5:  # the first calls start runs and warm caches
            took.append(elapsed * 1000)
    return took


def main(argv: list[str]) -> None:
    import anyio
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    from demo.mcp_world import start_checkpoint

    parser = argparse.ArgumentParser(prog="bench_mcp_gateway")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        shared = tmp / "shared"
        shared.mkdir()
        for i in range(args.calls + 5):
            (shared / f"f{i}.txt").write_text(f"line {i}\n")
        server, address = start_checkpoint(tmp, shared, {TOKEN: "mcp-gateway"})
        token = tmp / "gateway.token"
        token.write_text(TOKEN + "\n")
        token.chmod(0o600)
        settings = tmp / "mcp.toml"
        settings.write_text(f'checkpoint = "{address}"\ntoken_file = "{token}"\nperson = "alice"\n'
                            f'agent = "files"\nstate = "{tmp / "state"}"\n\n[upstreams.fs]\n'
                            f'command = {json.dumps(sys.executable)}\nargs = [{json.dumps(str(UPSTREAM))}]\n')
        env = {"PYTHONPATH": str(ROOT)}
        direct = StdioServerParameters(command=sys.executable, args=[str(UPSTREAM)], env=env)
        gateway = StdioServerParameters(command=sys.executable, args=["-m", "warden.cli", "mcp", "serve", "--settings",
                                                                      str(settings)], env=env, cwd=str(ROOT))

        async def measure() -> tuple[list[float], list[float]]:
            async with Client(direct, cache=None) as upstream, Client(gateway, cache=None) as governed:
                plain = await _timed(upstream, args.calls, shared, "read_text_file")
                through = await _timed(governed, args.calls, shared, "fs__read_text_file")
            return plain, through

        try:
            plain, through = anyio.run(measure)
        finally:
            server.stop(grace=0.5)
    (p50_direct, p99_direct), (p50_gw, p99_gw) = _percentiles(plain), _percentiles(through)
    print(f"tools/call over stdio, {args.calls} calls each (ms)")
    print(f"  upstream directly      p50 {p50_direct:7.2f}  p99 {p99_direct:7.2f}")
    print(f"  through warden mcp     p50 {p50_gw:7.2f}  p99 {p99_gw:7.2f}")
    print(f"  added by the gateway   p50 {p50_gw - p50_direct:7.2f}  p99 {p99_gw - p99_direct:7.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
