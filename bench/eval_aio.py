"""Evaluation, not shipped: the checkpoint's own handlers under grpc.aio against the threaded server.

The question was whether grpc.aio with the decision log committed on the event loop would beat
grpcio's thread-pool server. This runs the same CheckpointService both ways and loads each with
h2load (c=1, and 8 connections x 4 streams):
- `sync`: `warden checkpoint serve` as shipped (thread pool, group commit on the log's thread);
- `aio`: grpc.aio, each handler called on the loop; with one thread the log always takes its
  inline path, one commit per record (the floor any on-loop commit would have to beat).
Not run by `make bench` (the file is not bench_*):

    .venv/bin/python bench/eval_aio.py
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import secrets
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from bench.bench_cerbos import grpc_frame, warden_request  # noqa: E402
from bench.bench_grpc import _cpu_seconds, _free_port, _start_run  # noqa: E402


async def serve_aio(port: int, data: Path, token: str) -> None:
    from checkpoint.server import AuthPolicy, create_server
    from checkpoint.server.app import _record_unauthenticated
    from checkpoint.server.grpc_api import handlers
    from checkpoint.server.ratelimit import PeerLimiter
    from warden.grants import SigningKey

    auth = AuthPolicy(tokens={hashlib.sha256(token.encode()).digest(): "driver"})
    checkpoint, _ = create_server(None, uds_path=data / "unused.sock", policy_dir=ROOT / "policies", data_dir=data,
                                  key=SigningKey.load(data / "grant.key"), auth=auth, watch_interval=None)
    generic = handlers(checkpoint.service, auth, _record_unauthenticated(checkpoint.service, PeerLimiter()))

    class OnTheLoop(grpc.GenericRpcHandler):
        def service(self, details: Any) -> Any:
            handler = generic.service(details)
            if handler is None or handler.unary_unary is None:
                return None
            behavior = handler.unary_unary

            async def call(request: Any, context: Any) -> Any:
                return behavior(request, context)

            return grpc.unary_unary_rpc_method_handler(call, request_deserializer=handler.request_deserializer,
                                                       response_serializer=handler.response_serializer)

    server = grpc.aio.server()
    server.add_generic_rpc_handlers((OnTheLoop(),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--serve-aio":
        asyncio.run(serve_aio(int(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]))
        return 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tmp = Path(tempfile.mkdtemp(prefix="warden-eval-aio-"))
    servers = {}
    try:
        for name in ("sync", "aio"):
            data = tmp / name
            subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)], cwd=ROOT, env=env,
                           check=True, capture_output=True)
            token = secrets.token_urlsafe(32)
            (data / "checkpoint.tokens").write_text(f"driver {token}\n")
            port = _free_port()
            cmd = ([sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--address",
                    f"127.0.0.1:{port}", "--socket", "", "--reload-interval", "0"] if name == "sync"
                   else [sys.executable, __file__, "--serve-aio", str(port), str(data), token])
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            body = tmp / f"{name}.bin"
            run_token = _start_run(f"127.0.0.1:{port}", token, proc)
            body.write_bytes(grpc_frame(warden_request(run_token, "get_task", {"task_id": "task-42"})))
            servers[name] = (proc, port, token, body)
        print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for _ in range(2):
            for name, (proc, port, token, body) in servers.items():
                for clients, streams in ((1, 1), (8, 4)):
                    cpu = _cpu_seconds(proc.pid)
                    out = subprocess.run(
                        ["h2load", "-c", str(clients), "-m", str(streams), "-D", "3", "--warm-up-time", "1", "-d",
                         str(body), "-H", "content-type: application/grpc", "-H", "te: trailers", "-H",
                         f"authorization: Bearer {token}",
                         f"http://127.0.0.1:{port}/warden.checkpoint.v1.CheckpointService/Check"],
                        capture_output=True, text=True, timeout=120).stdout
                    rate = re.search(r"([\d.]+) req/s", out)
                    done = re.search(r"(\d+) succeeded", out)
                    assert rate and done, out
                    per_call = (_cpu_seconds(proc.pid) - cpu) / max(int(done.group(1)), 1) * 1e6
                    print(f"{name:<5} c={clients * streams:<3} {float(rate.group(1)):>8.0f} calls/s, "
                          f"server CPU {per_call:>5.0f} us/call", flush=True)
    finally:
        for proc, *_ in servers.values():
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
