"""`warden up`: the three processes on loopback with embedded defaults, healthy or not at all.

Checks first that a Docker engine answers and that every tool image is present (building the
local images with scripts/build-images.sh when they are missing). Then starts `warden checkpoint
serve`, `warden toolrunner serve` and `warden driver serve` as child processes (logs under
DATA/logs/), creates missing key material first, waits until each answers the gRPC health check
with SERVING, and stops them in reverse order on Ctrl-C or SIGTERM.

Each process gets a folder of its own, holding only what it needs:

    DATA/operator.token          the person's operator credential for the driver (the CLI reads it);
                                 the person is `--person`, else WARDEN_PERSON, else alice (the
                                 sample tenant's admin), written once into operators.tokens
    DATA/checkpoint.token        the person's own checkpoint credential: approvals, rejections and
                                 reading the decision log go to the checkpoint with it, never
                                 through the driver (its line `PERSON TOKEN` is in checkpoint.tokens)
    DATA/checkpoint/             grant.key, checkpoint.tokens, the decision log
    DATA/toolrunner/             toolrunner.tokens, toolrunner.db; the grant key is passed
                                 explicitly as DATA/checkpoint/grant.key
    DATA/driver/                 operators.tokens, the driver's own checkpoint.tokens and
                                 toolrunner.tokens lines, driver.db; never a grant key

With a store setting (`warden up --store URL`, WARDEN_STORE or `[store] url`) all three keep
their state there instead (docs/fleet.md): each child is given it in its environment, as
WARDEN_STORE and WARDEN_STORE_PASSWORD_FILE, never on its command line, where `ps` would show a
password written into the URL. `--migrate` runs `warden store migrate` on it first.

All three still run as the same OS user here, so the folders keep honest processes apart but do
not stop a compromised driver from reading DATA/checkpoint/grant.key: real separation needs a
separate OS user per process (or separate hosts/containers), with each folder readable by its
owner only (docs/driver.md).
"""

from __future__ import annotations

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
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from warden.cli import DEFAULT_GRACE, STOP_MARGIN
from warden.datafolder import (
    CHECKPOINT_TOKENS_FILE,
    GRANT_KEY_FILE,
    OPERATOR_TOKEN_FILE,
    OPERATORS_FILE,
    TOOLRUNNER_TOKENS_FILE,
    caller_line,
    ensure_operator,
    ensure_person_checkpoint_token,
    operator_name,
    write_private,
)

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PreflightError(RuntimeError):
    pass


def roles_note(policies: Path, person: str) -> str | None:
    """A warning when `person` is an operator of no tenant that has an agent: every run of an
    agent they start would be refused `role_required`. None when they are one somewhere, or when
    the folder does not load (preflight and the checkpoint say why)."""
    from checkpoint.policy import load_policy_dir  # type: ignore[attr-defined]
    from checkpoint.policy.roles import has_role

    try:
        loaded = load_policy_dir(policies)
    except Exception:  # noqa: BLE001 - PolicyLoadError
        return None
    with_agents = sorted({agent.tenant for agent in loaded.agents.values()})
    if not with_agents or any(has_role(loaded.tenants.get(t), person, "operator") for t in with_agents):
        return None
    return (f"person {person!r} (DATA/driver/{OPERATORS_FILE}) is an operator of none of the tenants "
            f"{', '.join(with_agents)} ({policies}): the checkpoint will refuse the runs they start "
            f"(role_required). Name them under a tenant's roles, or name another person "
            f"(`warden up --person NAME` on a data folder without an operators file)")


def preflight(policies: Path, build: bool = True) -> list[str]:
    """Docker answers and every tool image of `policies` is present; returns the images.

    Missing images are built once with scripts/build-images.sh (local, no registry). Raises
    PreflightError saying exactly what to run otherwise.
    """
    from checkpoint.policy import load_policy_dir  # type: ignore[attr-defined]
    from toolrunner.errors import RunnerError
    from toolrunner.server import connect_docker

    try:
        api = connect_docker()
    except RunnerError as exc:
        raise PreflightError(f"{exc.message}\nrun: scripts/ensure-docker.sh") from None
    try:
        tools = load_policy_dir(policies).tools
    except Exception as exc:  # PolicyLoadError: every error, file:line
        raise PreflightError(f"policies in {policies} do not load:\n{exc}") from None
    specs: list[Any] = [getattr(t, "spec", t) for t in tools.values()]
    images = sorted({t.run.image for t in specs if t.run})

    def missing() -> list[str]:
        absent = []
        for ref in images:
            try:
                api.inspect_image(ref)
            except Exception:  # noqa: BLE001 - not found or not inspectable: not usable either way
                absent.append(ref)
        return absent

    absent = missing()
    script = ROOT / "scripts" / "build-images.sh"
    if absent and build and script.exists():
        done = subprocess.run([str(script)], capture_output=True, text=True)
        if done.returncode != 0:
            raise PreflightError(f"tool images {', '.join(absent)} are missing and {script} failed:\n"
                                 f"{done.stdout}{done.stderr}")
        absent = missing()
    if absent:
        raise PreflightError(f"tool images {', '.join(absent)} are not present on this Docker engine (never "
                             f"pulled). Build them: scripts/build-images.sh (after scripts/ensure-docker.sh); "
                             f"an image that script does not build must be loaded with `docker load` or "
                             f"`docker build` under that exact name.")
    return images


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


PROCESSES = ("checkpoint", "toolrunner", "driver")


def metrics_addresses(base: str | None) -> dict[str, str]:
    """Each process's metrics address from `warden up --metrics-address HOST:PORT` (also
    WARDEN_METRICS_ADDRESS, which every child would otherwise read as the same port): the
    checkpoint on PORT, the toolrunner on PORT+1, the driver on PORT+2; port 0 gives each a free
    one. Empty without a base. ValueError for an address that is not HOST:PORT."""
    if not base:
        return {}
    host, sep, port = base.rpartition(":")
    if not sep or not port.isdigit() or int(port) + len(PROCESSES) - 1 > 65535:
        raise ValueError(f"--metrics-address {base!r}: give HOST:PORT with PORT+2 at most 65535 "
                         f"(the checkpoint serves on PORT, the toolrunner on PORT+1, the driver on PORT+2) "
                         f"[metrics_address_unavailable]")
    first = int(port)
    # port 0: picked here rather than by each child, so the addresses printed are the ones served
    return {name: f"{host}:{first + i if first else free_port()}" for i, name in enumerate(PROCESSES)}


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
    person: str | None = None  # the person at the keyboard when DATA has no operators file yet
    serve_args: list[str] = field(default_factory=list)  # given to all three, e.g. --log-format json
    grace: float = DEFAULT_GRACE  # what the children drain for (serve_args carries --grace to them)
    metrics: dict[str, str] = field(default_factory=dict)  # each process's own metrics address, if any
    # the one store all three keep their state in: WARDEN_STORE (and WARDEN_STORE_PASSWORD_FILE)
    # for every child; empty: each keeps SQLite files in its own folder
    store_env: dict[str, str] = field(default_factory=dict)
    migrate: bool = False  # `warden store migrate` on that store before anything starts
    children: list[Child] = field(default_factory=list)

    @property
    def driver_address(self) -> str:
        return f"127.0.0.1:{self.driver_port}"

    def _warden(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "warden.cli", *args]

    @property
    def checkpoint_data(self) -> Path:
        return self.data / "checkpoint"

    @property
    def toolrunner_data(self) -> Path:
        return self.data / "toolrunner"

    @property
    def driver_data(self) -> Path:
        return self.data / "driver"

    @property
    def grant_key(self) -> Path:
        return self.checkpoint_data / GRANT_KEY_FILE

    def prepare(self) -> None:
        """Key material, each piece in the folder of the process that needs it."""
        for folder in (self.data, self.checkpoint_data, self.toolrunner_data, self.driver_data):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)
        subprocess.run(self._warden("keys", "init", "--data", str(self.checkpoint_data)), check=True,
                       stdout=subprocess.DEVNULL)
        ensure_operator(self.data, self.person, operators_path=self.driver_data / OPERATORS_FILE)
        ensure_person_checkpoint_token(self.data, operator_name(self.driver_data / OPERATORS_FILE),
                                       self.checkpoint_data / CHECKPOINT_TOKENS_FILE)
        # The driver's checkpoint token: its own line only, never the checkpoint's whole file.
        driver_cp = self.driver_data / CHECKPOINT_TOKENS_FILE
        line = caller_line(self.checkpoint_data / CHECKPOINT_TOKENS_FILE, "driver")
        if line is None:
            raise RuntimeError(f"{self.checkpoint_data / CHECKPOINT_TOKENS_FILE} holds no token for 'driver'")
        if caller_line(driver_cp, "driver") != line:
            driver_cp.unlink(missing_ok=True)
            write_private(driver_cp, line + "\n")
        # The driver's token for the toolrunner's Cancel and GetReceipt.
        runner_tokens = self.toolrunner_data / TOOLRUNNER_TOKENS_FILE
        driver_tr = self.driver_data / TOOLRUNNER_TOKENS_FILE
        line = caller_line(runner_tokens, "driver")
        if line is None or caller_line(driver_tr, "driver") != line:
            line = f"driver {secrets.token_urlsafe(32)}"
            for path in (runner_tokens, driver_tr):
                path.unlink(missing_ok=True)
                write_private(path, line + "\n")

    def _metrics_args(self, name: str) -> list[str]:
        # given to each child explicitly: a flag wins over the WARDEN_METRICS_ADDRESS they inherit
        return ["--metrics-address", self.metrics[name]] if name in self.metrics else []

    def plan(self) -> list[Child]:
        """The three children: argv, address, log; nothing started."""
        cp = f"127.0.0.1:{self.checkpoint_port}"
        tr = f"127.0.0.1:{self.toolrunner_port}"
        logs = self.data / "logs"
        return [
            Child("checkpoint", cp, self._warden("checkpoint", "serve", "--address", cp, "--policies", str(self.policies),
                                                 "--data", str(self.checkpoint_data),
                                                 *self._metrics_args("checkpoint"), *self.serve_args),
                  logs / "checkpoint.log"),
            Child("toolrunner", tr, self._warden(
                "toolrunner", "serve", "--address", tr, "--policies", str(self.policies),
                "--data", str(self.toolrunner_data), "--key", str(self.grant_key),
                "--tokens", str(self.toolrunner_data / TOOLRUNNER_TOKENS_FILE), *self._metrics_args("toolrunner"),
                *self.serve_args),
                logs / "toolrunner.log"),
            Child("driver", self.driver_address, self._warden(
                "driver", "serve", "--address", self.driver_address, "--policies", str(self.policies),
                "--data", str(self.driver_data), "--checkpoint", cp, "--toolrunner", tr, *self.driver_args,
                *self._metrics_args("driver"), *self.serve_args),
                logs / "driver.log"),
        ]

    def start(self, timeout: float = 90.0, out=sys.stdout) -> None:  # type: ignore[no-untyped-def]
        preflight(self.policies)
        self.prepare()
        note = roles_note(self.policies, operator_name(self.driver_data / OPERATORS_FILE))
        if note:
            print(f"warning: {note}", file=out, flush=True)
        (self.data / "logs").mkdir(exist_ok=True)
        env = {**os.environ, **self.store_env}
        if self.migrate:
            done = subprocess.run(self._warden("store", "migrate"), env=env, capture_output=True, text=True)
            if done.returncode != 0:
                raise RuntimeError(f"warden store migrate failed (exit {done.returncode}):\n{done.stdout}{done.stderr}")
            print(done.stdout.rstrip(), file=out, flush=True)
        self.children = self.plan()
        for child in self.children:
            log_file = open(child.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
            child.proc = subprocess.Popen(child.argv, stdout=log_file, stderr=subprocess.STDOUT, env=env,
                                          stdin=subprocess.DEVNULL, start_new_session=True)
            log_file.close()
            try:
                wait_healthy(child.address, timeout, child.proc)
            except (RuntimeError, TimeoutError) as exc:
                tail = child.log_path.read_text(errors="replace").splitlines()[-15:]
                self.stop()
                raise RuntimeError(f"{child.name} did not start: {exc}\n--- {child.log_path}\n" + "\n".join(tail)) from None
            metrics = f", metrics on {self.metrics[child.name]}" if child.name in self.metrics else ""
            print(f"  {child.name:<10} healthy on {child.address}{metrics}  (log {child.log_path})", file=out,
                  flush=True)

    def stop(self) -> None:
        for child in reversed(self.children):
            if child.proc is not None and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        for child in reversed(self.children):
            if child.proc is None:
                continue
            try:
                child.proc.wait(self.grace + STOP_MARGIN)  # its drain, then its log closes
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait()

    def failed(self) -> Child | None:
        return next((c for c in self.children if c.proc is not None and c.proc.poll() is not None), None)


def prepare_only(stack: Stack, out=sys.stdout) -> int:  # type: ignore[no-untyped-def]
    """`warden up --prepare-only`: the key material `prepare` makes, laid out for processes that
    each run in a container of their own (deploy/compose.yaml), and nothing started. Each
    container mounts only its own folder, so the toolrunner's gets its own copy of the grant key;
    the driver's never holds one."""
    stack.prepare()
    copy = stack.toolrunner_data / GRANT_KEY_FILE
    key = stack.grant_key.read_text()
    if not copy.exists() or copy.read_text() != key:
        copy.unlink(missing_ok=True)
        write_private(copy, key)
    for folder in (stack.checkpoint_data, stack.toolrunner_data, stack.driver_data):
        print(f"{folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}", file=out, flush=True)
    return 0


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
