"""Every process serves Prometheus metrics over real HTTP: build info, process figures, its gRPC calls
in flight and finished, and /healthz; a SIGTERM then drains and exits 0. Real processes, real ports
(the toolrunner needs the Docker engine, as it does to serve at all)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from warden.driver.v1 import driver_pb2 as dpb
from warden.driver.v1 import driver_pb2_grpc as dpb_grpc
from warden.toolrunner.v1 import toolrunner_pb2 as tpb
from warden.toolrunner.v1 import toolrunner_pb2_grpc as tpb_grpc

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def healthz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def start(tmp_path: Path, *argv: str) -> tuple[subprocess.Popen, grpc.Channel | None, int]:
    data = tmp_path / "data"
    if not (data / "grant.key").exists():
        subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)], cwd=REPO,
                       check=True, capture_output=True, timeout=60)
    grpc_port, metrics_port = free_port(), free_port()
    address = ["--address", f"127.0.0.1:{grpc_port}"] if argv[0] != "checkpoint" else \
        ["--address", "", "--socket", str(tmp_path / "cp.sock")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {"PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "warden.cli", *argv, "--data", str(data), "--policies",
                             str(REPO / "policies"), *address, "--metrics-address", f"127.0.0.1:{metrics_port}"],
                            cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    target = f"unix:{tmp_path / 'cp.sock'}" if argv[0] == "checkpoint" else f"127.0.0.1:{grpc_port}"
    channel = grpc.insecure_channel(target)
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        try:
            got = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            if got.status == health_pb2.HealthCheckResponse.SERVING:
                return proc, channel, metrics_port
        except grpc.RpcError:
            pass
        assert time.monotonic() < deadline, f"{argv[0]} did not start"
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()


def common(figures: dict[str, float], process: str) -> None:
    info = [k for k in figures if k.startswith("warden_build_info{")]
    assert len(info) == 1 and f'process="{process}"' in info[0] and 'version="' in info[0], info
    assert figures[info[0]] == 1
    assert figures["process_resident_memory_bytes"] > 1e6
    assert figures["process_cpu_seconds_total"] > 0
    assert figures["process_open_fds"] > 0
    assert figures[f"warden_{process}_grpc_calls_in_flight"] == 0
    assert figures[f"warden_{process}_draining"] == 0


def test_checkpoint_metrics(tmp_path):
    proc, channel, port = start(tmp_path, "checkpoint", "serve", "--reload-interval", "0")
    try:
        figures = scrape(port)
        common(figures, "checkpoint")
        assert figures["warden_checkpoint_policy_loaded"] == 1
        assert healthz(port)[0] == 200
    finally:
        channel.close()
        assert stop(proc) == 0


def test_driver_metrics_count_calls_by_method_and_code(tmp_path):
    proc, channel, port = start(tmp_path, "driver", "serve")
    try:
        common(scrape(port), "driver")
        stub = dpb_grpc.DriverServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListRuns(dpb.ListRunsRequest(), timeout=5)  # no operator token
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        figures = scrape(port)
        assert figures['warden_driver_grpc_calls_total{code="UNAUTHENTICATED",method="ListRuns"}'] == 1
        assert figures['warden_driver_grpc_call_seconds_count{method="ListRuns"}'] == 1
        assert healthz(port) == (200, {"status": "SERVING", "draining": False, "store": "answering"})
    finally:
        channel.close()
        assert stop(proc) == 0


def test_toolrunner_metrics(tmp_path):
    proc, channel, port = start(tmp_path, "toolrunner", "serve")
    try:
        common(scrape(port), "toolrunner")
        stub = tpb_grpc.ToolRunnerServiceStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            stub.GetReceipt(tpb.GetReceiptRequest(decision_id="d-1"), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        figures = scrape(port)
        assert figures['warden_toolrunner_grpc_calls_total{code="UNAUTHENTICATED",method="GetReceipt"}'] == 1
        assert figures["warden_toolrunner_tool_calls_running"] == 0
        status, body = healthz(port)
        assert status == 200 and body["policy_revision"]
    finally:
        channel.close()
        assert stop(proc) == 0


@pytest.mark.parametrize("process", ["toolrunner", "driver", "checkpoint"])
@pytest.mark.parametrize("how", ["taken", "not HOST:PORT"])
def test_a_metrics_address_that_cannot_be_served_stops_the_start_in_one_line(tmp_path, process, how):
    """A port another process listens on (as when one WARDEN_METRICS_ADDRESS reached three
    processes), or an address that is no HOST:PORT: exit 2, one line naming the address and the
    code, no traceback, and the gRPC port never taken."""
    data = tmp_path / "data"
    subprocess.run([sys.executable, "-m", "warden.cli", "keys", "init", "--data", str(data)], cwd=REPO,
                   check=True, capture_output=True, timeout=60)
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    address = f"127.0.0.1:{holder.getsockname()[1]}" if how == "taken" else "localhost"
    grpc_port = free_port()
    extra = ["--tokens", str(data / "checkpoint.tokens")] if process == "checkpoint" else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")} | {
        "WARDEN_METRICS_ADDRESS": address, "PYTHONPATH": str(REPO)}  # this checkout's code, from any folder
    try:
        done = subprocess.run([sys.executable, "-m", "warden.cli", process, "serve", "--data", str(data),
                               "--policies", str(REPO / "policies"), "--address", f"127.0.0.1:{grpc_port}", *extra],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    finally:
        holder.close()
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [x for x in done.stderr.splitlines() if "cannot serve metrics" in x]
    assert f"cannot serve metrics on '{address}'" in line and "[metrics_address_unavailable]" in line, line
    if how == "taken":
        assert "another process listens there" in line
    with socket.socket() as probe:  # nothing was left listening on the gRPC port
        probe.bind(("127.0.0.1", grpc_port))
