"""What tracing costs a Check() over real gRPC: off (the default) against on.

Each figure is instructions per call counted by valgrind's callgrind, as in bench_instructions:
(a process making N more Check() calls - one making none) / N, the checkpoint server and a sync
client in one process on loopback, every call carrying the driver's `authorization` and a
`traceparent` header. "off" is a checkpoint started with no OTLP endpoint (no interceptor, no
OpenTelemetry import); "on" configures the SDK with spans made and ended but not exported (the
exporter's batching runs on its own thread, outside the call). Skipped when valgrind is absent.

    python -m bench tracing
    python bench/bench_tracing.py --calls 1000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "t" * 20
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _loop(mode: str, n: int) -> None:
    import grpc

    from checkpoint.server.app import create_server
    from warden.auth import AuthPolicy
    from warden.checkpoint.v1 import checkpoint_pb2 as pb
    from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
    from warden.grants import SigningKey

    if mode == "on":
        from warden import tracing

        tracing.configure("bench", None, always=True)
    server, port = create_server(
        "127.0.0.1:0", policy_dir=ROOT / "policies", data_dir=Path(tempfile.mkdtemp()), key=SigningKey.generate(),
        auth=AuthPolicy(tokens={hashlib.sha256(TOKEN.encode()).digest(): "driver"}), watch_interval=None,
    )
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.CheckpointServiceStub(channel)
    md = [("authorization", f"Bearer {TOKEN}"), ("traceparent", TRACEPARENT)]
    token = stub.StartRun(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE),
                          metadata=md).run_token
    request = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"),
                              counters=pb.Counters(stretch_turns=1, total_turns=1))
    request.tool_call.arguments.update({"task_id": "task-42"})
    for _ in range(100):
        stub.Check(request, metadata=md)
    for _ in range(n):
        assert stub.Check(request, metadata=md).verdict == pb.VERDICT_ALLOW
    channel.close()
    server.stop(0)


def _instructions(mode: str, n: int) -> int:
    out = tempfile.mktemp(prefix="callgrind-")
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--loop", mode,
         str(n)], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    Path(out).unlink(missing_ok=True)
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"callgrind failed: {run.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--modes", default="off,on", help="off, on or both (default off,on)")
    parser.add_argument("--loop", nargs=2, metavar=("MODE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop:
        sys.path.insert(0, str(ROOT))
        _loop(args.loop[0], int(args.loop[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): skipped")
        return 0
    for mode in args.modes.split(","):
        base, more = _instructions(mode, 0), _instructions(mode, args.calls)
        print(f"instructions per gRPC Check(), tracing {mode}: {(more - base) / args.calls:,.0f} "
              f"(callgrind, {args.calls} calls)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
