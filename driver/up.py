"""`warden up`: the three processes on loopback with embedded defaults, healthy or not at all.

Starts `warden checkpoint serve`, `warden toolrunner serve` and `warden driver serve` as child
processes (logs under DATA/logs/), creates missing key material first (grant key, the driver's
checkpoint token, an operator token for the person at the keyboard), waits until each answers the
gRPC health check with SERVING, and stops them in reverse order on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import getpass
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

OPERATORS_FILE = "operators.tokens"
OPERATOR_TOKEN_FILE = "operator.token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def ensure_operator(data: Path, person: str | None = None) -> str:
    """The operator credential of the person at this keyboard; created once, readable by them only."""
    token_file = data / OPERATOR_TOKEN_FILE
    if not token_file.exists():
        token = secrets.token_urlsafe(32)
        person = person or getpass.getuser() or "operator"
        _write_private(data / OPERATORS_FILE, f"# person token: operator credentials for DriverService\n{person} {token}\n")
        _write_private(token_file, token + "\n")
    return token_file.read_text().strip()


def wait_healthy(address: str, timeout: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"exited with code {proc.returncode} before it was healthy")
            try:
                if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} not healthy after {timeout:.0f}s")
            time.sleep(0.2)


@dataclass
class Child:
    name: str
    address: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None


@dataclass
class Stack:
    data: Path
    policies: Path
    checkpoint_port: int = 7401
    toolrunner_port: int = 7402
    driver_port: int = 7403
    driver_args: list[str] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)

    @property
    def driver_address(self) -> str:
        return f"127.0.0.1:{self.driver_port}"

    def _warden(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "warden.cli", *args]

    def prepare(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        subprocess.run(self._warden("keys", "init", "--data", str(self.data)), check=True, stdout=subprocess.DEVNULL)
        ensure_operator(self.data)

    def start(self, timeout: float = 90.0, out=sys.stdout) -> None:  # type: ignore[no-untyped-def]
        self.prepare()
        cp = f"127.0.0.1:{self.checkpoint_port}"
        tr = f"127.0.0.1:{self.toolrunner_port}"
        logs = self.data / "logs"
        logs.mkdir(exist_ok=True)
        self.children = [
            Child("checkpoint", cp, self._warden("checkpoint", "serve", "--address", cp, "--policies", str(self.policies),
                                                 "--data", str(self.data)), logs / "checkpoint.log"),
            Child("toolrunner", tr, self._warden("toolrunner", "serve", "--address", tr, "--policies", str(self.policies),
                                                 "--data", str(self.data)), logs / "toolrunner.log"),
            Child("driver", self.driver_address, self._warden(
                "driver", "serve", "--address", self.driver_address, "--policies", str(self.policies),
                "--data", str(self.data), "--checkpoint", cp, "--toolrunner", tr, *self.driver_args),
                logs / "driver.log"),
        ]
        for child in self.children:
            log_file = open(child.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
            child.proc = subprocess.Popen(child.argv, stdout=log_file, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
            log_file.close()
            try:
                wait_healthy(child.address, timeout, child.proc)
            except (RuntimeError, TimeoutError) as exc:
                tail = child.log_path.read_text(errors="replace").splitlines()[-15:]
                self.stop()
                raise RuntimeError(f"{child.name} did not start: {exc}\n--- {child.log_path}\n" + "\n".join(tail)) from None
            print(f"  {child.name:<10} healthy on {child.address}  (log {child.log_path})", file=out, flush=True)

    def stop(self, grace: float = 10.0) -> None:
        for child in reversed(self.children):
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            if child.proc is None:
                continue
            try:
                child.proc.wait(grace)
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()

    def failed(self) -> Child | None:
        return next((c for c in self.children if c.proc is not None and c.proc.poll() is not None), None)


def run_up(stack: Stack) -> int:
    print(f"warden up: data in {stack.data}, policies from {stack.policies}", flush=True)
    try:
        stack.start()
    except RuntimeError as exc:
        print(f"warden up: {exc}", file=sys.stderr)
        return 1
    print(f"ready. driver on {stack.driver_address}; operator credential in {stack.data / OPERATOR_TOKEN_FILE}.\n"
          f"try: warden run recon --goal goals/recon-lab-scan.yaml --script demo/script.yaml --follow\n"
          "Ctrl-C stops all three.", flush=True)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    while not done.wait(1.0):
        dead = stack.failed()
        if dead is not None:
            print(f"warden up: {dead.name} exited with code {dead.proc.returncode if dead.proc else '?'}; "
                  f"see {dead.log_path}. stopping.", file=sys.stderr)
            stack.stop()
            return 1
    print("\nstopping driver, toolrunner, checkpoint...", flush=True)
    stack.stop()
    print("stopped.", flush=True)
    return 0
