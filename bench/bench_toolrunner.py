"""Toolrunner latency: start-to-receipt for a trivial tool, beside `docker run --rm` of the same
image from the CLI, measured side by side in one run.

    .venv/bin/python -m bench.bench_toolrunner [--runs N]

Three figures, each the median (and p90) over N runs:
- Execute over gRPC on loopback: grant check, container create/attach/start/wait/remove,
  scrubbing, receipt stored in SQLite (what a driver waits for);
- `docker run --rm` with the same hardening flags (the CLI doing the same container work);
- plain `docker run --rm --network none` (the floor the daemon sets).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
IMAGE = "warden-tools:local"
TOOL_ARGV = ["/bin/sh", "/tools/list_templates.sh"]
HARDENED = [
    "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,noexec,nosuid,nodev,size=16m",
    "--cap-drop", "ALL", "--security-opt", "no-new-privileges:true", "--user", "65534:65534",
    "--pids-limit", "64", "--memory", "256m", "--memory-swap", "256m", "--cpus", "1",
    "--ulimit", "nofile=256:256", "--ulimit", "fsize=16777216:16777216", "--init", "--log-driver", "none",
]  # fmt: skip


def _summary(name: str, samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    p90 = ms[min(len(ms) - 1, int(round(0.9 * (len(ms) - 1))))]
    return f"{name:<44} median {statistics.median(ms):7.1f} ms   p90 {p90:7.1f} ms   (n={len(ms)})"


def _cli(args: list[str], runs: int) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(["docker", "run", "--rm", *args, IMAGE, *TOOL_ARGV], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    # `python -m bench` calls main() with no arguments; its own argv is not ours.
    args = parser.parse_args(argv or [])

    from toolrunner.runner import RunnerConfig
    from toolrunner.server import create_server
    from warden import grants
    from warden.toolrunner.v1 import toolrunner_pb2 as pb
    from warden.toolrunner.v1 import toolrunner_pb2_grpc as pb_grpc
    from warden.tools import Tool

    subprocess.run([str(ROOT / "scripts" / "build-images.sh")], check=True, stdout=subprocess.DEVNULL)
    tool = Tool.model_validate(
        {
            "kind": "Tool",
            "name": "list_templates",
            "access": "read",
            "input_schema": {"type": "object", "additionalProperties": False, "properties": {}},
            "run": {"image": IMAGE, "command": TOOL_ARGV},
        }
    )
    key = grants.SigningKey.generate()
    with tempfile.TemporaryDirectory() as data:
        running, port = create_server(
            "127.0.0.1:0",
            tools={tool.name: tool},
            policy_revision="bench",
            keys=key,
            data_dir=data,
            config=RunnerConfig(runner_id="bench-" + uuid.uuid4().hex[:6]),
        )
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        stub = pb_grpc.ToolRunnerServiceStub(channel)

        def execute() -> float:
            grant = grants.sign(
                key,
                decision_id=uuid.uuid4().hex,
                run_id="bench",
                agent="bench",
                agent_version="bench@1",
                tool=tool.name,
                arguments={},
                policy_revision="bench",
            )
            request = pb.ExecuteRequest(run_id="bench", agent="bench", agent_version="bench@1", tool=tool.name, grant=grant)
            start = time.perf_counter()
            receipt = stub.Execute(request, timeout=60).receipt
            elapsed = time.perf_counter() - start
            assert receipt.exit_code == 0 and "nginx-restart" in receipt.output, receipt
            return elapsed

        try:
            execute()  # warm-up: first container, first SQLite write
            _cli(HARDENED, 1)
            grpc_samples, hardened, plain = [], [], []
            # Interleaved, so drift in the daemon's speed hits all three alike.
            for _ in range(args.runs):
                grpc_samples.append(execute())
                hardened += _cli(HARDENED, 1)
                plain += _cli(["--network", "none"], 1)
        finally:
            channel.close()
            running.stop(grace=None)

    print("toolrunner: start-to-receipt latency of a trivial tool (list_templates)")
    print(_summary("Execute over gRPC (grant..receipt stored)", grpc_samples))
    print(_summary("docker run --rm, same hardening (CLI)", hardened))
    print(_summary("docker run --rm --network none (CLI)", plain))
    ratio = statistics.median(grpc_samples) / statistics.median(hardened)
    print(f"ratio Execute / docker run (hardened): {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
