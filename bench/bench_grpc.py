"""Check() over gRPC on loopback vs a no-op grpcio server, side by side in one run.

Both servers run as their own processes with the same thread pool and options; the no-op one
answers the same method with the bytes of a real checkpoint answer (grant included), so message
sizes are identical. The client (grpc.aio, one channel) sends the same request bytes, with the
same bearer token, to both. Reported: throughput and p50/p99 latency at each concurrency, the
checkpoint/no-op ratios against the targets in DESIGN.md, and the checkpoint's resident memory
after start and after N decisions (decision log on, synchronous=NORMAL).

    .venv/bin/python bench/bench_grpc.py [--seconds 5] [--concurrency 1,32] [--decisions 200000] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent import futures
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from warden.checkpoint.v1 import checkpoint_pb2 as pb  # noqa: E402

METHOD = "/warden.checkpoint.v1.CheckpointService/Check"
WORKERS = int(os.environ.get("BENCH_WORKERS", "32"))  # the server's default
TARGET_THROUGHPUT = 0.85
TARGET_P99_C1 = 1.3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of a process so far: per-call CPU is robust to other load on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the no-op server (run in its own process: `bench_grpc.py --noop-server PORT FILE`) -----------


def noop_server(port: int, response_file: str) -> None:
    answer = Path(response_file).read_bytes()

    def check(_request: bytes, _context: grpc.ServicerContext) -> bytes:
        return answer

    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=WORKERS),
        options=[("grpc.max_receive_message_length", 1 << 20), ("grpc.so_reuseport", 0)],
    )
    handler = grpc.unary_unary_rpc_method_handler(check)  # raw bytes in and out: no parsing at all
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("warden.checkpoint.v1.CheckpointService", {"Check": handler}),)
    )
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


# -- the client -----------------------------------------------------------------------------


async def _load(
    target: str, request: bytes, token: str, concurrency: int, *, seconds: float, count: int | None
) -> dict:
    metadata = (("authorization", f"Bearer {token}"),)
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(METHOD)
        for _ in range(50):  # warm the connection and the server's threads
            await call(request, metadata=metadata, timeout=10)
        latencies: list[int] = []
        deadline = time.perf_counter() + seconds
        remaining = [count]

        async def worker() -> None:
            while True:
                if count is None:
                    if time.perf_counter() >= deadline:
                        return
                else:
                    if remaining[0] <= 0:
                        return
                    remaining[0] -= 1
                t0 = time.perf_counter_ns()
                await call(request, metadata=metadata, timeout=30)
                latencies.append(time.perf_counter_ns() - t0)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    n = len(latencies)
    return {
        "n": n,
        "rps": n / elapsed,
        "p50_us": latencies[n // 2] / 1000,
        "p99_us": latencies[min(n - 1, int(n * 0.99))] / 1000,
    }


def _wait_ready(target: str, request: bytes, token: str, proc: subprocess.Popen) -> bytes:
    deadline = time.monotonic() + 30
    channel = grpc.insecure_channel(target)
    call = channel.unary_unary(METHOD)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
            try:
                return call(request, metadata=(("authorization", f"Bearer {token}"),), timeout=2)
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        channel.close()


def _start_run(target: str, token: str, proc: subprocess.Popen) -> str:
    """A run token for recon, as the driver gets one (StartRun); every bench Check presents it."""
    channel = grpc.insecure_channel(target)
    try:
        start = channel.unary_unary(
            "/warden.checkpoint.v1.CheckpointService/StartRun",
            request_serializer=pb.StartRunRequest.SerializeToString,
            response_deserializer=pb.StartRunResponse.FromString,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                got = start(pb.StartRunRequest(agent="recon", person="alice", mode=pb.RUN_MODE_INTERACTIVE),
                            metadata=(("authorization", f"Bearer {token}"),), timeout=2)
                if not got.run_token:
                    raise RuntimeError(f"StartRun refused: {got.decision}")
                return got.run_token
            except grpc.RpcError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        channel.close()


def _request(run_token: str) -> bytes:
    req = pb.CheckRequest(
        run=pb.RunContext(run_token=run_token),
        tool_call=pb.ToolCall(tool="get_task"),
        counters=pb.Counters(stretch_turns=1, total_turns=1, turn_tool_calls=0),
    )
    req.tool_call.arguments.update({"task_id": "task-42"})
    return req.SerializeToString()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="alternating rounds per concurrency; medians reported (default 3)",
    )
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument(
        "--decisions", type=int, default=200_000, help="decisions before the second RSS reading"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="pin both servers to CPU 0 and the client to the others (os.sched_setaffinity), as a sidecar "
        "given its own core would run",
    )
    parser.add_argument("--noop-server", nargs=2, metavar=("PORT", "RESPONSE_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.noop_server:
        noop_server(int(args.noop_server[0]), args.noop_server[1])
        return 0

    levels = [int(c) for c in args.concurrency.split(",")]
    server_cpus: set[int] | None = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            parser.error("--pin needs at least two CPUs")
        server_cpus = {cpus[0]}
        os.sched_setaffinity(0, set(cpus[1:]))  # this process is the client

    def pin_server() -> None:  # in the server's process before exec: every thread it starts inherits it
        if server_cpus:
            os.sched_setaffinity(0, server_cpus)

    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-grpc-"))
    data = tmp / "data"
    token = secrets.token_urlsafe(32)
    data.mkdir()
    subprocess.run(
        [sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    tokens = data / "checkpoint.tokens"
    tokens.write_text(f"driver {token}\n")  # the shipped `driver` principal

    cp_port, noop_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    checkpoint = subprocess.Popen(
        [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies", str(ROOT / "policies"),
         "--address", f"127.0.0.1:{cp_port}", "--socket", "", "--reload-interval", "0", "--threads", str(WORKERS),
         "--pin-cpus", "off"],  # where it runs is the bench's choice (--pin), not warden's placement
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=pin_server,
    )  # fmt: skip
    noop = None
    try:
        cp_target, noop_target = f"127.0.0.1:{cp_port}", f"127.0.0.1:{noop_port}"
        request = _request(_start_run(cp_target, token, checkpoint))
        answer = _wait_ready(cp_target, request, token, checkpoint)
        decoded = pb.CheckResponse.FromString(answer)
        if decoded.verdict != pb.VERDICT_ALLOW or not decoded.HasField("grant"):
            raise RuntimeError(f"the bench request should be allowed with a grant, got {decoded}")
        rss_start = _rss_mb(checkpoint.pid)
        (tmp / "answer.bin").write_bytes(answer)
        noop = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--noop-server", str(noop_port), str(tmp / "answer.bin")],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=pin_server,
        )  # fmt: skip
        _wait_ready(noop_target, request, token, noop)

        print(
            f"Check() over gRPC, loopback; request {len(request)} B, answer {len(answer)} B; "
            f"{args.rounds} alternating rounds of {args.seconds:.0f} s, medians; load average {os.getloadavg()[0]:.1f}"
        )
        print(f"{'server':<12} {'conc':>4} {'calls/s':>9} {'p50 us':>8} {'p99 us':>8} {'CPU us/call':>12}")
        results: dict[tuple[str, int], dict] = {}
        decisions = 50
        for c in levels:
            runs: dict[str, list[dict]] = {"no-op": [], "checkpoint": []}
            # Alternating the two servers round by round spreads drift in machine load evenly.
            for _ in range(args.rounds):
                for name, target, pid in (
                    ("no-op", noop_target, noop.pid),
                    ("checkpoint", cp_target, checkpoint.pid),
                ):
                    cpu = _cpu_seconds(pid)
                    r = asyncio.run(_load(target, request, token, c, seconds=args.seconds, count=None))
                    r["cpu_us"] = (_cpu_seconds(pid) - cpu) / (r["n"] + 50) * 1e6
                    runs[name].append(r)
                    if name == "checkpoint":
                        decisions += r["n"] + 50
            for name, rs in runs.items():
                med = {k: statistics.median(r[k] for r in rs) for k in ("rps", "p50_us", "p99_us", "cpu_us")}
                results[(name, c)] = med
                print(
                    f"{name:<12} {c:>4} {med['rps']:>9.0f} {med['p50_us']:>8.0f} {med['p99_us']:>8.0f}"
                    f" {med['cpu_us']:>12.0f}"
                )
        print()
        for c in levels:
            cp, base = results[("checkpoint", c)], results[("no-op", c)]
            line = f"concurrency {c:>2}: throughput {cp['rps'] / base['rps']:.0%} of no-op (target >= {TARGET_THROUGHPUT:.0%})"
            line += f", p99 {cp['p99_us'] / base['p99_us']:.2f}x no-op"
            if c == 1:
                line += f" (target <= {TARGET_P99_C1}x)"
            print(line)

        # Memory: sampled in steps so a plateau (warm-up: worker threads, caches) is told apart
        # from steady growth (a leak).
        samples = [(1, rss_start), (decisions, _rss_mb(checkpoint.pid))]
        step = max(1, args.decisions // 4)
        while decisions < args.decisions:
            n = min(step, args.decisions - decisions)
            asyncio.run(_load(cp_target, request, token, 32, seconds=0, count=n))
            decisions += n + 50
            samples.append((decisions, _rss_mb(checkpoint.pid)))
        rss_end = samples[-1][1]
        print("checkpoint RSS (MB) by decisions: " + ", ".join(f"{d:,}: {m:.1f}" for d, m in samples))
        growth = (rss_end - rss_start) / rss_start
        warm = samples[1][1]
        print(
            f"checkpoint RSS: {rss_start:.1f} MB after start, {rss_end:.1f} MB after {decisions:,} decisions "
            f"({growth:+.1%} from start, {(rss_end - warm) / warm:+.1%} from {samples[1][0]:,} decisions; "
            "target: under 150 MB and growth <= 10%)"
        )
        log_size = (data / "decisions.db").stat().st_size + sum(
            p.stat().st_size for p in data.glob("decisions.db-*") if p.exists()
        )
        print(f"decision log: {log_size / 1e6:.1f} MB on disk")
    finally:
        for proc in (checkpoint, noop):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
