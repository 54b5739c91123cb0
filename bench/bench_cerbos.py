"""warden beside Cerbos: the same calls, the same clients, one run, on loopback.

Cerbos (a Go policy decision point with CEL conditions) comes from the npm package
`@cerbos/cerbos-linux-x64`, pinned below by version and integrity and kept in
~/.cache/warden-bench (never in the repository). Without npm or the network the bench says so and
skips. bench/cerbos/ holds its policy, an equivalent of the shipped recon agent, and its config.

1. Equivalence: eight sample calls go to both. Cerbos answers ALLOW or DENY only; warden's
   REQUIRE_APPROVAL and HALT are "not now", so the two must agree on which calls may run now,
   and the bench lists every answer side by side.
2. Throughput and latency, alternating servers round by round: a no-op grpcio server answering
   with the bytes of warden's answer (the floor of Python gRPC here), warden with 1 worker and with
   `--workers auto` as shipped (log on, record before answer, fail closed; each worker pinned to a
   CPU of its own), and `--workers auto --pin-cpus off`, against Cerbos with its audit off
   and with its `local` audit backend (which answers before its record is durable). Clients: the
   same Python grpc.aio client (one connection at c=1; 8 connections at c=32, since SO_REUSEPORT
   spreads connections, not calls, over workers) and h2load (C, 8 connections x 4 streams) when
   installed; p50 latency for h2load comes from its per-request log (`--log-file`). Server CPU is
   the CPU time of every server process per call, over the measured calls only.
3. warden's CheckStream: 32 calls in flight over a few streams (`--streams`, default 8, one per
   connection), each call recorded before its answer, against Cerbos's unary calls at c=32 (Cerbos
   has no streaming API); and warden's server CPU per call against the no-op server's.
4. Memory: RSS of each warden worker by decisions, over `--decisions` (default 200,000).

    .venv/bin/python -m bench cerbos       # or: .venv/bin/python bench/bench_cerbos.py --seconds 3
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import re
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402
from google.protobuf import json_format, message_factory  # noqa: E402
from google.protobuf.descriptor_pool import DescriptorPool  # noqa: E402

from bench.bench_grpc import _cpu_seconds, _free_port, _rss_mb, _start_run, _wait_ready  # noqa: E402
from warden.checkpoint.v1 import checkpoint_pb2 as pb  # noqa: E402

CERBOS_PACKAGE = "@cerbos/cerbos-linux-x64"
CERBOS_VERSION = "0.55.0"
# npm's integrity of that tarball (sha512): what was fetched is what was measured before
CERBOS_INTEGRITY = "sha512-eLZUycJfaQWK0XTRgH/Oz2E3XiNCUavDd1LhzFxhUpZ3s5CuQqmqG327ta0On8YOTxuZO/19cG4kvfC22r03/Q=="
CACHE = Path(os.environ.get("WARDEN_BENCH_CACHE", Path.home() / ".cache" / "warden-bench"))
CERBOS_DIR = ROOT / "bench" / "cerbos"
WARDEN_METHOD = "/warden.checkpoint.v1.CheckpointService/Check"
CERBOS_SERVICE = "cerbos.svc.v1.CerbosService"
CERBOS_METHOD = f"/{CERBOS_SERVICE}/CheckResources"
CONNECTIONS = 8  # at c=32: connections x streams = 8 x 4
TARGET_C32 = 0.6  # warden --workers auto against Cerbos with audit `local` (the goal: 1.0)
TARGET_P50_C1 = 1.2
TARGET_STREAM = 1.5  # CheckStream calls/s at c=32 against Cerbos's unary calls/s with audit `local`
TARGET_CPU_NOOP = 1.25  # warden's server CPU per call against the no-op grpcio server's, c=32
STREAM_METHOD = "/warden.checkpoint.v1.CheckpointService/CheckStream"


# -- fetching Cerbos ------------------------------------------------------------------------


def cerbos_binary() -> Path | str:
    """The pinned Cerbos binary, fetched once with npm into the cache; a reason string when not."""
    folder = CACHE / f"cerbos-{CERBOS_VERSION}"
    binary = folder / "package" / "cerbos-linux-x64"
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        return "npm is not installed"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        got = subprocess.run(["npm", "pack", f"{CERBOS_PACKAGE}@{CERBOS_VERSION}", "--silent"], cwd=folder,
                             capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "npm pack timed out"
    tarballs = list(folder.glob("*.tgz"))
    if got.returncode != 0 or not tarballs:
        return f"npm pack {CERBOS_PACKAGE}@{CERBOS_VERSION} failed: {(got.stderr or got.stdout).strip()[:300]}"
    data = tarballs[0].read_bytes()
    integrity = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if integrity != CERBOS_INTEGRITY:
        tarballs[0].unlink()
        return f"the fetched {CERBOS_PACKAGE}@{CERBOS_VERSION} has integrity {integrity}, not the pinned one"
    with tarfile.open(tarballs[0]) as tar:
        member = tar.getmember("package/cerbos-linux-x64")
        tar.extractall(folder, members=[member], filter="data")
    binary.chmod(0o755)
    return binary


# -- the servers ----------------------------------------------------------------------------


@dataclass
class Server:
    name: str
    target: str
    proc: subprocess.Popen
    method: str
    request: bytes
    metadata: tuple[tuple[str, str], ...] = ()
    workers: bool = False  # a supervisor: the servers are its children
    results: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    shares: list[list[float]] = field(default_factory=list)  # each worker's share of the CPU, per c=32 run

    def pids(self) -> list[int]:
        if not self.workers:
            return [self.proc.pid]
        return [self.proc.pid, *self.worker_pids()]

    def worker_pids(self) -> list[int]:
        if not self.workers:
            return [self.proc.pid]
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return sorted(int(p) for p in path.read_text().split())

    def cpu(self) -> float:
        total = 0.0
        for pid in self.pids():
            try:
                total += _cpu_seconds(pid)
            except OSError:
                pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_warden(tmp: Path, workers: str, env: dict[str, str], extra: tuple[str, ...] = ()) -> tuple[Server, str, str]:
    from checkpoint.server.workers import worker_count

    data = tmp / f"warden-{workers}{''.join(extra)}"
    subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)], cwd=ROOT, env=env,
                   check=True, capture_output=True)
    token = secrets.token_urlsafe(32)
    (data / "checkpoint.tokens").write_text(f"driver {token}\n")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(data), "--policies",
         str(ROOT / "policies"), "--address", f"127.0.0.1:{port}", "--socket", "", "--reload-interval", "0",
         "--workers", workers, *extra],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    target = f"127.0.0.1:{port}"
    run_token = _start_run(target, token, proc)
    request = warden_request(run_token, "get_task", {"task_id": "task-42"})
    _wait_ready(target, request, token, proc)
    server = Server(" ".join(["warden --workers", workers, *extra]), target, proc, WARDEN_METHOD, request,
                    (("authorization", f"Bearer {token}"),), workers=workers != "1")
    if server.workers:  # every worker answers before the measurement starts
        deadline = time.monotonic() + 60
        expected = worker_count(workers)
        while len(server.worker_pids()) < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{server.name}: workers did not start")
            time.sleep(0.2)
        time.sleep(2.0)
    return server, token, run_token


def start_noop(warden: Server, tmp: Path, env: dict[str, str]) -> Server:
    """bench_grpc's no-op grpcio server answering warden's method with the bytes of a real answer
    (grant included): the floor of the Python gRPC stack on this machine, in this run."""
    with grpc.insecure_channel(warden.target) as channel:
        answer = channel.unary_unary(warden.method)(warden.request, metadata=warden.metadata, timeout=10)
    (tmp / "noop-answer.bin").write_bytes(answer)
    port = _free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "bench_grpc.py"), "--noop-server", str(port),
                             str(tmp / "noop-answer.bin")], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    target = f"127.0.0.1:{port}"
    _wait_ready(target, warden.request, "unused", proc)
    return Server("no-op grpcio server", target, proc, WARDEN_METHOD, warden.request, warden.metadata)


def warden_request(run_token: str, tool: str, args: dict[str, Any], turn_tool_calls: int = 0) -> bytes:
    req = pb.CheckRequest(run=pb.RunContext(run_token=run_token), tool_call=pb.ToolCall(tool=tool),
                          counters=pb.Counters(stretch_turns=1, total_turns=1, turn_tool_calls=turn_tool_calls))
    req.tool_call.arguments.update(args)
    return req.SerializeToString()


class CerbosMessages:
    """CheckResources request and response classes, read from the server by gRPC reflection: no
    Cerbos stubs or protos in this repository."""

    def __init__(self, target: str):
        from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
            ProtoReflectionDescriptorDatabase,
        )

        self._channel = grpc.insecure_channel(target)
        pool = DescriptorPool(ProtoReflectionDescriptorDatabase(self._channel))
        method = pool.FindServiceByName(CERBOS_SERVICE).FindMethodByName("CheckResources")
        self.request = message_factory.GetMessageClass(method.input_type)
        self.response = message_factory.GetMessageClass(method.output_type)

    def encode(self, tool: str, args: dict[str, Any], turn_tool_calls: int = 0) -> bytes:
        body = {
            "requestId": "bench",
            "principal": {"id": "recon", "roles": ["agent"], "attr": {"tenant": "acme", "mode": "interactive"}},
            "resources": [{"actions": [tool], "resource": {"kind": "tool_call", "id": "call",
                           "attr": {"tenant": "acme", "turn_tool_calls": turn_tool_calls, "args": args}}}],
        }
        return json_format.ParseDict(body, self.request()).SerializeToString()

    def effect(self, answer: bytes, tool: str) -> str:
        got = self.response.FromString(answer)
        return json_format.MessageToDict(got)["results"][0]["actions"][tool].removeprefix("EFFECT_")

    def close(self) -> None:
        self._channel.close()


def start_cerbos(binary: Path, tmp: Path, audit: bool, env: dict[str, str]) -> Server:
    grpc_port, http_port = _free_port(), _free_port()
    folder = tmp / f"cerbos-audit-{'local' if audit else 'off'}"
    folder.mkdir()
    config = (CERBOS_DIR / "config.yaml").read_text().format(
        http_port=http_port, grpc_port=grpc_port, policies=CERBOS_DIR / "policies",
        audit_enabled="true" if audit else "false", audit_dir=folder / "audit")
    (folder / "config.yaml").write_text(config)
    proc = subprocess.Popen([str(binary), "server", f"--config={folder / 'config.yaml'}"],
                            env={**env, "CERBOS_NO_TELEMETRY": "1"}, stdout=subprocess.DEVNULL,
                            stderr=(folder / "cerbos.log").open("wb"))
    target = f"127.0.0.1:{grpc_port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            messages = CerbosMessages(target)
            break
        except Exception:  # noqa: BLE001 - not listening yet
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Cerbos did not start: {(folder / 'cerbos.log').read_text()[-2000:]}") from None
            time.sleep(0.2)
    request = messages.encode("get_task", {"task_id": "task-42"})
    messages.close()
    return Server(f"Cerbos, audit {'local' if audit else 'off'}", target, proc, CERBOS_METHOD, request)


# -- equivalence ----------------------------------------------------------------------------

SAMPLES: list[tuple[str, str, dict[str, Any], int]] = [
    ("read a task", "get_task", {"task_id": "task-42"}, 0),
    ("list templates", "list_templates", {}, 0),
    ("a tool not on the allowlist", "cancel_task", {"task_id": "task-42"}, 0),
    ("a path for a task id", "get_task", {"task_id": "../../etc/passwd"}, 0),
    ("a scan of a lab host", "create_task_from_template", {"template": "web-basic", "target": "web1.lab.example.com"}, 0),
    ("a scan of an off-limits host", "create_task_from_template", {"template": "web-basic", "target": "payments.lab.example.com"}, 0),
    ("a scan of a whole range", "create_task_from_template", {"template": "web", "target": "10.20.0.0/24"}, 0),
    ("a fifth call in a turn (budget 4)", "get_task", {"task_id": "task-43"}, 4),
]  # fmt: skip


def equivalence(warden: Server, run_token: str, cerbos: Server) -> bool:
    messages = CerbosMessages(cerbos.target)
    agree = 0
    print(f"{'sample':<36} {'warden':<28} {'Cerbos':<7} {'runs now: same?'}")
    with grpc.insecure_channel(warden.target) as wch, grpc.insecure_channel(cerbos.target) as cch:
        check_w, check_c = wch.unary_unary(warden.method), cch.unary_unary(cerbos.method)
        for label, tool, args, calls in SAMPLES:
            answer = pb.CheckResponse.FromString(
                check_w(warden_request(run_token, tool, args, calls), metadata=warden.metadata, timeout=10))
            effect = messages.effect(check_c(messages.encode(tool, args, calls), timeout=10), tool)
            verdict = pb.Verdict.Name(answer.verdict).removeprefix("VERDICT_")
            same = (verdict == "ALLOW") == (effect == "ALLOW")
            agree += same
            print(f"{label:<36} {verdict + ' ' + answer.code:<28} {effect:<7} {'yes' if same else 'NO'}")
    messages.close()
    print(f"equivalence: {agree} of {len(SAMPLES)} agree on whether the call may run now "
          "(Cerbos has no REQUIRE_APPROVAL or HALT: both are DENY there)")
    return agree == len(SAMPLES)


# -- load -----------------------------------------------------------------------------------


async def python_load(server: Server, concurrency: int, seconds: float) -> dict[str, float]:
    channels = [grpc.aio.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(1 if concurrency == 1 else CONNECTIONS)]
    try:
        calls = [ch.unary_unary(server.method) for ch in channels]
        for call in calls:
            for _ in range(20):  # warm each connection (and the worker behind it)
                await call(server.request, metadata=server.metadata, timeout=10)
        latencies: list[int] = []
        deadline = time.perf_counter() + seconds

        async def client(call: Any) -> None:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter_ns()
                await call(server.request, metadata=server.metadata, timeout=30)
                latencies.append(time.perf_counter_ns() - t0)

        cpu = server.cpu()
        per_worker = {pid: _cpu_seconds(pid) for pid in server.worker_pids()}
        started = time.perf_counter()
        await asyncio.gather(*(client(calls[i % len(calls)]) for i in range(concurrency)))
        elapsed = time.perf_counter() - started
        cpu = server.cpu() - cpu
        used = [_cpu_seconds(pid) - before for pid, before in per_worker.items()]
        if concurrency > 1:  # how evenly the connections spread over the workers
            server.shares.append([u / max(sum(used), 1e-9) for u in used])
    finally:
        for ch in channels:
            await ch.close()
    latencies.sort()
    n = len(latencies)
    return {"rps": n / elapsed, "p50_us": latencies[n // 2] / 1000, "cpu_us": cpu / n * 1e6}


async def stream_load(server: Server, concurrency: int, seconds: float, streams: int) -> dict[str, float]:
    """`concurrency` calls in flight over `streams` CheckStreams (one connection each): each stream
    keeps its share of calls outstanding, sending the next as an answer comes."""
    item = pb.CheckStreamRequest(request=pb.CheckRequest.FromString(server.request)).SerializeToString()
    channels = [grpc.aio.insecure_channel(server.target, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(streams)]
    answered = 0
    try:
        async def one(channel: Any, in_flight: int, deadline: float) -> None:
            nonlocal answered
            call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b,
                                         response_deserializer=pb.CheckStreamResponse.FromString)(
                metadata=server.metadata, timeout=seconds + 60)
            for _ in range(in_flight):
                await call.write(item)
            while True:
                answer = await call.read()
                if answer is grpc.aio.EOF or answer.WhichOneof("outcome") != "response":
                    raise RuntimeError(f"{server.name}: CheckStream answered {answer}")
                if time.perf_counter() < deadline:
                    answered += 1
                    await call.write(item)
                else:
                    in_flight -= 1
                    if not in_flight:
                        break
            await call.done_writing()

        shares = [concurrency // streams + (1 if i < concurrency % streams else 0) for i in range(streams)]
        await asyncio.gather(*(one(ch, 8, time.perf_counter() + 0.5) for ch in channels))  # warm up
        answered = 0
        cpu = server.cpu()
        started = time.perf_counter()
        await asyncio.gather(*(one(ch, n, started + seconds) for ch, n in zip(channels, shares, strict=True) if n))
        elapsed = time.perf_counter() - started
        cpu = server.cpu() - cpu
    finally:
        for ch in channels:
            await ch.close()
    return {"rps": answered / elapsed, "cpu_us": cpu / max(answered, 1) * 1e6}


def grpc_frame(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


def h2load(server: Server, tmp: Path, concurrency: int, seconds: float) -> dict[str, float]:
    body = tmp / f"body-{abs(hash(server.name))}.bin"
    body.write_bytes(grpc_frame(server.request))
    clients, streams = (1, 1) if concurrency == 1 else (CONNECTIONS, concurrency // CONNECTIONS)
    cmd = ["h2load", "-c", str(clients), "-m", str(streams),
           "-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers"]
    for key, value in server.metadata:
        cmd += ["-H", f"{key}: {value}"]
    cmd.append(f"http://{server.target}{server.method}")
    # warmed up by a run of its own: h2load's --warm-up-time leaves the warm-up's calls out of its
    # counts but not out of the servers' CPU time, which then read a third high per call
    subprocess.run([cmd[0], "-D", "1", *cmd[1:]], capture_output=True, timeout=60)
    log = tmp / "h2load-requests.tsv"
    cmd[1:1] = ["-D", str(int(seconds)), "--log-file", str(log)]
    cpu = server.cpu()
    got = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    cpu = server.cpu() - cpu
    rate = re.search(r"finished in [\d.]+\w*, ([\d.]+) req/s", got.stdout)
    done = re.search(r"requests: \d+ total, \d+ started, (\d+) done, (\d+) succeeded", got.stdout)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", got.stdout)
    if got.returncode != 0 or not rate or not done:
        raise RuntimeError(f"h2load failed: {got.stdout[-1500:]} {got.stderr[-500:]}")
    n = int(done.group(1))
    return {"rps": float(rate.group(1)), "mean_us": _us(mean.group(1)) if mean else float("nan"),
            "p50_us": _logged_p50_us(log, n), "cpu_us": cpu / max(n, 1) * 1e6}


def _logged_p50_us(log: Path, counted: int) -> float:
    """Median latency from h2load's per-request log (start us, status, us to the response's end).

    The log holds the warm-up's requests too; the summary counts only the last `counted`, and the
    log is in order of completion, so those are its last rows. Failed streams (status -1) are left
    out, as h2load's own figures leave them out."""
    rows = [line.split("\t") for line in log.read_text().splitlines() if line.strip()]
    log.unlink()
    latencies = sorted(int(r[2]) for r in rows[max(0, len(rows) - counted):] if len(r) >= 3 and r[1] != "-1")
    return float(latencies[len(latencies) // 2]) if latencies else float("nan")


def _us(text: str) -> float:
    """h2load's `123.45us`, `1.23ms` or `1.2s` in microseconds."""
    found = re.fullmatch(r"([\d.]+)(us|ms|s)", text)
    if not found:
        return float("nan")
    return float(found.group(1)) * {"us": 1, "ms": 1000, "s": 1e6}[found.group(2)]


# -- the run --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement (default 3)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds; medians reported (default 2)")
    parser.add_argument("--decisions", type=int, default=200_000,
                        help="decisions for the RSS-per-worker reading (default 200,000; with h2load)")
    parser.add_argument("--no-h2load", action="store_true", help="the Python client only")
    parser.add_argument("--streams", type=int, default=CONNECTIONS,
                        help="CheckStreams carrying warden's 32 calls in flight (default %(default)s)")
    args = parser.parse_args(argv)

    binary = cerbos_binary()
    if isinstance(binary, str):
        print(f"bench cerbos: skipped: {binary} (Cerbos {CERBOS_VERSION} comes from npm {CERBOS_PACKAGE})")
        return 0
    use_h2load = not args.no_h2load and shutil.which("h2load") is not None
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-cerbos-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    servers: list[Server] = []
    try:
        # warden as it starts by default (each process pinned to a CPU of its own and moved when other
        # work crowds it), and --workers auto with pinning off, to show what pinning is worth
        one, _, run_token = start_warden(tmp, "1", env)
        servers.append(start_noop(one, tmp, env))
        servers.append(one)
        floating, _, _ = start_warden(tmp, "auto", env, ("--pin-cpus", "off"))
        servers.append(floating)
        auto, _, _ = start_warden(tmp, "auto", env)
        servers.append(auto)
        servers.append(start_cerbos(binary, tmp, audit=False, env=env))
        local = start_cerbos(binary, tmp, audit=True, env=env)
        servers.append(local)
        print(f"Cerbos {CERBOS_VERSION} ({binary}); warden --workers auto = {len(auto.worker_pids())} workers; "
              f"{os.cpu_count()} CPUs; load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print()
        same = equivalence(one, run_token, local)
        print()

        clients = ["python"] + (["h2load"] if use_h2load else [])
        for client in clients:
            for c in (1, 32):
                for _ in range(args.rounds):  # alternating: drift in the machine's load hits all alike
                    for server in servers:
                        r = (asyncio.run(python_load(server, c, args.seconds)) if client == "python"
                             else h2load(server, tmp, c, args.seconds))
                        server.results.setdefault(f"{client}/{c}", []).append(r)
        for _ in range(args.rounds):  # warden's stream against Cerbos's unary calls of the same rounds
            auto.results.setdefault("stream/32", []).append(
                asyncio.run(stream_load(auto, 32, args.seconds, args.streams)))
        report(servers, clients, [auto, floating], local)
        report_stream(auto, servers[0], local, args.streams)
        if not same:
            print("equivalence check FAILED: the two policies no longer say the same")

        if use_h2load and args.decisions:
            rss_by_decisions(auto, tmp, args.decisions)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        return 0 if same else 1
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def _med(server: Server, key: str, field_name: str) -> float:
    runs = server.results.get(key, [])
    return statistics.median(r[field_name] for r in runs) if runs else float("nan")


def report(servers: list[Server], clients: list[str], autos: list[Server], local: Server) -> None:
    for client in clients:
        lat, lat_field = "p50 us", "p50_us"
        print(f"client: {client}")
        print(f"{'server':<36} {'c=1 calls/s':>12} {'c=1 ' + lat:>12} {'c=32 calls/s':>13} {'CPU us/call c=32':>17}")
        for s in servers:
            print(f"{s.name:<36} {_med(s, f'{client}/1', 'rps'):>12.0f} {_med(s, f'{client}/1', lat_field):>12.0f}"
                  f" {_med(s, f'{client}/32', 'rps'):>13.0f} {_med(s, f'{client}/32', 'cpu_us'):>17.0f}")
        for auto in autos:
            if client == "python" and auto.shares:
                spread = [max(s) for s in auto.shares if len(s) > 1]
                if spread:
                    print(f"{auto.name}: the busiest worker's share of the workers' CPU, per run: "
                          + ", ".join(f"{x:.0%}" for x in spread) + " (SO_REUSEPORT hashes connections)")
        for auto in autos:
            c32 = _med(auto, f"{client}/32", "rps") / _med(local, f"{client}/32", "rps")
            p50 = _med(auto, f"{client}/1", lat_field) / _med(local, f"{client}/1", lat_field)
            c1 = _med(auto, f"{client}/1", "rps") / _med(local, f"{client}/1", "rps")
            print(f"ratios, {auto.name.removeprefix('warden ')} / Cerbos audit local ({client}): c=32 throughput "
                  f"{c32:.2f}x (target >= {TARGET_C32}x, {'met' if c32 >= TARGET_C32 else 'NOT met'}); c=1 {lat} "
                  f"{p50:.2f}x (target <= {TARGET_P50_C1}x, {'met' if p50 <= TARGET_P50_C1 else 'NOT met'}); "
                  f"c=1 throughput {c1:.2f}x"
                  + (f"; c=1 mean us {_med(auto, 'h2load/1', 'mean_us') / _med(local, 'h2load/1', 'mean_us'):.2f}x"
                     if client == "h2load" else ""))
        print()


def report_stream(auto: Server, noop: Server, local: Server, streams: int) -> None:
    rps, cpu = _med(auto, "stream/32", "rps"), _med(auto, "stream/32", "cpu_us")
    against = rps / _med(local, "python/32", "rps")
    print(f"{auto.name}, CheckStream, 32 in flight over {streams} streams: {rps:.0f} calls/s, "
          f"server CPU {cpu:.0f} us/call")
    print(f"ratio against Cerbos audit local's unary calls at c=32 (Python client): {against:.2f}x "
          f"(target >= {TARGET_STREAM}x, {'met' if against >= TARGET_STREAM else 'NOT met'})")
    for name, mine in (("unary Check", _med(auto, "python/32", "cpu_us")), ("CheckStream", cpu)):
        ratio = mine / _med(noop, "python/32", "cpu_us")
        print(f"server CPU per call, {name} / the no-op server's unary calls (c=32, Python): {ratio:.2f}x "
              f"(target <= {TARGET_CPU_NOOP}x, {'met' if ratio <= TARGET_CPU_NOOP else 'NOT met'})")
    print()


def rss_by_decisions(server: Server, tmp: Path, decisions: int) -> None:
    """RSS of each worker, sampled in steps: a plateau (warm-up) is told apart from growth (a leak)."""
    body = tmp / "rss-body.bin"
    body.write_bytes(grpc_frame(server.request))
    pids = server.worker_pids()
    samples = [(0, [_rss_mb(p) for p in pids])]
    done, step = 0, max(1, decisions // 4)
    while done < decisions:
        n = min(step, decisions - done)
        cmd = ["h2load", "-n", str(n), "-c", str(CONNECTIONS), "-m", "4", "-d", str(body),
               "-H", "content-type: application/grpc", "-H", "te: trailers"]
        for key, value in server.metadata:
            cmd += ["-H", f"{key}: {value}"]
        cmd.append(f"http://{server.target}{server.method}")
        subprocess.run(cmd, capture_output=True, timeout=600, check=True)
        done += n
        samples.append((done, [_rss_mb(p) for p in pids]))
    print(f"RSS per worker (MB) of {server.name}, by decisions after the timed runs:")
    for count, values in samples:
        print(f"  {count:>8,}: " + ", ".join(f"{v:.1f}" for v in values))
    first, last = samples[1][1], samples[-1][1]
    growth = max((b - a) / a for a, b in zip(first, last, strict=True))
    print(f"  growth from {samples[1][0]:,} to {samples[-1][0]:,} decisions: at most {growth:+.1%} per worker")


if __name__ == "__main__":
    sys.exit(main())
