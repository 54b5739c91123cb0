"""Instructions per decision and per Check(), counted by valgrind's callgrind: repeatable whatever
else the machine is doing, so two commits compare on a shared, noisy machine.

Each figure is (instructions of a process that makes N more calls - those of one that makes
none) / N, after the same warm-up, with PYTHONHASHSEED fixed. Skipped when valgrind is absent.

- decide: the pure decision function on the bench request (the recon agent's get_task).
- check: CheckpointService.check() in process: run token, decision, grant, committed record.
- grpc: the whole Check RPC over a real loopback channel, server and a sync client in one process
  (interceptors, the handler, deserialising and serialising, grpcio's server and client layers;
  the client's share is the same before and after a server-side change, so a cut shows whole).
- stream: the same Check as one of N requests of one CheckStream, all sent at once (the stream's
  own opening is paid in both runs, so it cancels out; N=0 still opens one stream).

    python -m bench instructions            # the three, 1,000 calls each
    python bench/bench_instructions.py --calls 2000 --modes grpc
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


def _decide_loop(n: int) -> None:
    from bench.bench_decide import warden_decision

    fn = warden_decision()
    for _ in range(200):
        fn()
    for _ in range(n):
        fn()


def _check_loop(n: int) -> None:
    from checkpoint.server.app import create_server
    from warden.auth import AuthPolicy
    from warden.checkpoint.v1 import checkpoint_pb2 as pb
    from warden.grants import SigningKey

    server, _ = create_server(
        "127.0.0.1:0", policy_dir=ROOT / "policies", data_dir=Path(tempfile.mkdtemp()), key=SigningKey.generate(),
        auth=AuthPolicy(tokens={hashlib.sha256(b"t" * 20).digest(): "driver"}), watch_interval=None,
    )
    service = server.service
    token = service.run_acts.start_run(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE),
                              "token:driver").run_token

    def check() -> None:
        request = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"),
                                  counters=pb.Counters(stretch_turns=1, total_turns=1))
        request.tool_call.arguments.update({"task_id": "task-42"})
        assert service.check(request, "token:driver").verdict == pb.VERDICT_ALLOW

    for _ in range(100):
        check()
    for _ in range(n):
        check()
    server.stop(0)


def _grpc_loop(n: int) -> None:
    import grpc

    from checkpoint.server.app import create_server
    from warden.auth import AuthPolicy
    from warden.checkpoint.v1 import checkpoint_pb2 as pb
    from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
    from warden.grants import SigningKey

    server, port = create_server(
        "127.0.0.1:0", policy_dir=ROOT / "policies", data_dir=Path(tempfile.mkdtemp()), key=SigningKey.generate(),
        auth=AuthPolicy(tokens={hashlib.sha256(b"t" * 20).digest(): "driver"}), watch_interval=None,
    )
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.CheckpointServiceStub(channel)
    md = [("authorization", "Bearer " + "t" * 20)]
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


def _stream_loop(n: int) -> None:
    """N Checks over one CheckStream, all sent at once (the server reads as many ahead as it takes)."""
    import grpc

    from checkpoint.server.app import create_server
    from warden.auth import AuthPolicy
    from warden.checkpoint.v1 import checkpoint_pb2 as pb
    from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
    from warden.grants import SigningKey

    server, port = create_server(
        "127.0.0.1:0", policy_dir=ROOT / "policies", data_dir=Path(tempfile.mkdtemp()), key=SigningKey.generate(),
        auth=AuthPolicy(tokens={hashlib.sha256(b"t" * 20).digest(): "driver"}), watch_interval=None,
    )
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = pb_grpc.CheckpointServiceStub(channel)
    md = [("authorization", "Bearer " + "t" * 20)]
    token = stub.StartRun(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE),
                          metadata=md).run_token
    request = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"),
                              counters=pb.Counters(stretch_turns=1, total_turns=1))
    request.tool_call.arguments.update({"task_id": "task-42"})

    def stream(count: int) -> None:
        items = [pb.CheckStreamRequest(correlation_id=str(i), request=request) for i in range(count)]
        answers = list(stub.CheckStream(iter(items), metadata=md))
        assert [a.correlation_id for a in answers] == [str(i) for i in range(count)]
        assert all(a.response.verdict == pb.VERDICT_ALLOW for a in answers)

    stream(100)
    stream(n)
    channel.close()
    server.stop(0)


LOOPS = {"decide": _decide_loop, "check": _check_loop, "grpc": _grpc_loop, "stream": _stream_loop}


def _instructions(what: str, n: int) -> int:
    out = tempfile.mktemp(prefix="callgrind-")
    run = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--loop", what,
         str(n)], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    Path(out).unlink(missing_ok=True)
    found = re.search(r"Collected : (\d+)", run.stderr)
    if run.returncode != 0 or not found:
        raise RuntimeError(f"callgrind failed: {run.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--modes", default=",".join(LOOPS), help=f"which of {', '.join(LOOPS)} (default: all)")
    parser.add_argument("--loop", nargs=2, metavar=("WHAT", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loop:
        sys.path.insert(0, str(ROOT))
        LOOPS[args.loop[0]](int(args.loop[1]))
        return 0
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind): skipped")
        return 0
    for what in args.modes.split(","):
        if what not in LOOPS:
            parser.error(f"unknown mode {what!r}: choose from {', '.join(LOOPS)}")
        base, more = _instructions(what, 0), _instructions(what, args.calls)
        label = {"grpc": "gRPC Check()", "stream": "Check over a CheckStream"}.get(what, f"{what}()")
        print(f"instructions per {label}: {(more - base) / args.calls:,.0f} (callgrind, {args.calls} calls)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
