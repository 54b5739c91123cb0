"""SIGTERM drains a real driver process: a StartRun in flight (held by the checkpoint's decision log,
whose SQLite write lock this test takes, as a slow disk would) still completes and its run is
recorded, while health goes NOT_SERVING and a new call is refused with server_draining."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import yaml
from driver_harness import PLAN
from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.audit import DecisionReader
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.up import Stack, free_port

ROOT = Path(__file__).resolve().parents[2]


def in_flight(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return next(float(line.split()[1]) for line in text.splitlines()
                if line.startswith("warden_driver_grpc_calls_in_flight "))


def test_sigterm_lets_a_start_run_in_flight_finish_and_refuses_new_calls(tmp_path, policy_dir, tool_images):
    metrics_port = free_port()
    stack = Stack(tmp_path / "data", policy_dir, free_port(), free_port(), free_port(),
                  driver_args=["--metrics-address", f"127.0.0.1:{metrics_port}", "--grace", "60"])
    stack.start(timeout=90)
    driver = next(c for c in stack.children if c.name == "driver")
    lock = None
    try:
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"responses": [PLAN, {"action": "handoff", "reason": "enough"}]}))
        env = {**os.environ, "WARDEN_DRIVER": stack.driver_address, "WARDEN_DATA": str(stack.data)}
        lock = sqlite3.connect(stack.checkpoint_data / "decisions.db", isolation_level=None, timeout=10)
        lock.execute("BEGIN IMMEDIATE")  # the checkpoint's next record waits, and so does StartRun
        run = subprocess.Popen([sys.executable, "-m", "warden.cli", "run", "recon", "--goal",
                                str(ROOT / "goals" / "recon-lab-scan.yaml"), "--script", str(script)],
                               env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # a bound against a hang, not a measure: a busy machine may take long to start `warden run`
        deadline = time.monotonic() + 120
        while in_flight(metrics_port) != 1:
            assert time.monotonic() < deadline and run.poll() is None, "StartRun never reached the driver"
            time.sleep(0.05)

        channel = grpc.insecure_channel(stack.driver_address)
        health = health_pb2_grpc.HealthStub(channel)
        # the health stream tells each change as it happens: waiting on it waits for the event
        changes = health.Watch(health_pb2.HealthCheckRequest(), timeout=120)
        assert next(changes).status == health_pb2.HealthCheckResponse.SERVING
        driver.proc.send_signal(signal.SIGTERM)
        assert next(changes).status == health_pb2.HealthCheckResponse.NOT_SERVING, "health never went NOT_SERVING"
        changes.cancel()
        try:
            pb_grpc.DriverServiceStub(channel).ListRuns(pb.ListRunsRequest(), timeout=10)
            raise AssertionError("a call after SIGTERM was answered")
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in exc.details(), exc
        channel.close()
        assert run.poll() is None and driver.proc.poll() is None  # both wait for the log

        lock.execute("COMMIT")
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        assert driver.proc.wait(timeout=60) == 0
    finally:
        if lock is not None and lock.in_transaction:
            lock.execute("ROLLBACK")
        stack.stop()
    run_id = out.split()[1].rstrip(":")
    started = [r for r in DecisionReader(stack.checkpoint_data / "decisions.db").read()
               if r.get("run_id") == run_id and r.get("action") == "start_run"]
    assert started, f"the start of {run_id} is not in the decision log"
