"""Records per decision-log commit when Checks come over one CheckStream, all sent at once.

How many of a stream's records share a transaction does not depend on how busy the machine is
the way calls per second do: a stream whose requests are decided one after another commits each
record alone (1.0 record per commit); one whose requests are decided several at once lets the
log's group commit take them together. The server runs in this process on a loopback port, with
the shipped policies and a fresh data folder.

    python bench/bench_stream_commits.py --calls 2000 --streams 1
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="per stream")
    parser.add_argument("--streams", type=int, default=1)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
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
    items = [pb.CheckStreamRequest(correlation_id=str(i), request=request) for i in range(args.calls)]

    def stream() -> None:
        answers = list(stub.CheckStream(iter(items), metadata=md))
        assert [a.correlation_id for a in answers] == [i.correlation_id for i in items]
        assert all(a.response.verdict == pb.VERDICT_ALLOW for a in answers)

    before = server.log.stats()
    started = time.perf_counter()
    threads = [threading.Thread(target=stream) for _ in range(args.streams)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    after = server.log.stats()
    commits, records = after["batches"] - before["batches"], after["records"] - before["records"]
    print(f"{records} records in {commits} commits: {records / commits:.2f} records per commit "
          f"({args.streams} stream(s) of {args.calls}; {records / seconds:,.0f} calls/s, wall clock)")
    channel.close()
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
