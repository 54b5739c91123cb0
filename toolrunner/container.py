"""One tool call's container: the hardened spec, and its life from create to remove.

The hardening defaults, and why (CIS Docker benchmark section 5; what e2b, Modal, Docker's MCP
gateway and Codex do): a tool is untrusted code with untrusted input, so the container gets
no network, a read-only root with a small noexec tmpfs at /tmp, no capabilities, no privilege
gain through setuid (no-new-privileges), a non-root user, an init process that reaps zombies and
forwards the kill, ceilings on processes, memory (swap included), CPU, open files and file size,
no host namespaces, no mounts of the host at all (so no Docker socket), no log driver (the runner
reads the output from the attach stream, so a huge writer cannot fill the daemon's disk), and no
proxy settings copied from the client's config. Only the tool definition loosens any of them.

Output is read from an attach made before the container starts, so nothing printed early is
lost; the wall-clock timeout is enforced here, server side, with SIGKILL, and what was printed
until then is kept.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import docker
import docker.errors
from docker.types import LogConfig, Ulimit
from docker.utils.socket import frames_iter

from warden.tools import Limits

# Every container the runner creates carries these labels; the reaper finds leftovers by them.
LABEL = "warden.toolrunner"
LABEL_RUNNER = "warden.runner"
LABEL_DEADLINE = "warden.deadline"
LABEL_DECISION = "warden.decision_id"
LABEL_RUN = "warden.run_id"
LABEL_TOOL = "warden.tool"
# Past its timeout a container still gets this long to be read and removed by its runner
# before the reaper may take it.
REAP_GRACE_SECONDS = 30.0
# After a kill, how long the output stream may take to close before the runner closes it.
_DRAIN_SECONDS = 5.0

OnOutput = Callable[[str, bytes], None]


@dataclass(frozen=True)
class ContainerSpec:
    image_id: str
    argv: list[str]
    env: dict[str, str]
    user: str
    timeout_seconds: float
    limits: Limits = field(default_factory=lambda: Limits.model_validate({}))
    network: str | None = None  # a Docker network name; None means no network at all
    read_only_root: bool = True
    runtime: str | None = None
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    exit_code: int
    oom_killed: bool
    timed_out: bool
    cancelled: bool
    started_at: float
    finished_at: float

    @classmethod
    def not_run(cls, started_at: float, finished_at: float, *, cancelled: bool) -> Outcome:
        """A container that never ran to an exit of its own: no exit code, no OOM, no timeout."""
        return cls(-1, False, False, cancelled, started_at, finished_at)


def host_config(api: docker.APIClient, spec: ContainerSpec) -> dict:
    limits = spec.limits
    memory = f"{limits.memory_mb}m"
    fsize = limits.fsize_mb * 1024 * 1024
    # A networked tool resolves names as written: the host's search domains would turn a target
    # the checkpoint read as the name `payments` into `payments.lab.example.com`, a host it never
    # decided on. "." is Docker's "no search domain" (a network-less container takes no DNS option).
    dns = {"dns_search": ["."]} if spec.network else {}
    return api.create_host_config(
        **dns,
        network_mode=spec.network or "none",
        read_only=spec.read_only_root,
        tmpfs={"/tmp": f"rw,noexec,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges:true"],
        privileged=False,
        pids_limit=limits.pids,
        mem_limit=memory,
        memswap_limit=memory,  # equal to the memory limit: no swap
        nano_cpus=int(limits.cpus * 1e9),
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="fsize", soft=fsize, hard=fsize),
            Ulimit(name="core", soft=0, hard=0),
        ],
        init=True,
        ipc_mode="private",
        log_config=LogConfig(type="none"),
        oom_score_adj=500,  # if the host runs short, a tool dies before the services
        runtime=spec.runtime,
    )


def create(api: docker.APIClient, spec: ContainerSpec) -> str:
    deadline = time.time() + spec.timeout_seconds + REAP_GRACE_SECONDS
    labels = {LABEL: "1", LABEL_DEADLINE: f"{deadline:.3f}", **spec.labels}
    created = api.create_container(
        image=spec.image_id,
        # entrypoint + command together are exactly the tool's argv, whatever the image declares.
        entrypoint=spec.argv[:1],
        command=spec.argv[1:],
        user=spec.user,
        environment=dict(spec.env),
        working_dir="/tmp",
        labels=labels,
        host_config=host_config(api, spec),
        network_disabled=spec.network is None,
        use_config_proxy=False,
        stdin_open=False,
        tty=False,
    )
    return created["Id"]


class ContainerRun:
    """Runs one container to completion, timeout or cancel; always removes it."""

    def __init__(self, api: docker.APIClient, spec: ContainerSpec, on_output: OnOutput):
        self._api = api
        self._spec = spec
        self._on_output = on_output
        self._cancelled = threading.Event()
        self._lock = threading.Lock()  # start and cancel exclude each other: no cancel is lost
        self._started = False
        self.container_id: str | None = None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled.set()
            cid = self.container_id if self._started else None
        if cid:  # not started yet: it never will be
            self._kill(cid)

    def run(self) -> Outcome:
        api = self._api
        cid = create(api, self._spec)
        with self._lock:
            self.container_id = cid
        try:
            return self._attach_and_run(cid)
        finally:
            try:
                api.remove_container(cid, force=True)
            except docker.errors.NotFound:
                pass

    def _attach_and_run(self, cid: str) -> Outcome:
        api = self._api
        sock = api.attach_socket(cid, params={"stdout": 1, "stderr": 1, "stream": 1, "logs": 0})
        reader = threading.Thread(target=self._read, args=(sock,), name=f"attach-{cid[:12]}", daemon=True)
        reader.start()
        started = time.time()
        timed_out = False
        with self._lock:
            if not self._cancelled.is_set():
                api.start(cid)
                self._started = True
        if not self._started:  # cancelled between create and start: never started
            _close(sock)
            reader.join(_DRAIN_SECONDS)
            return Outcome.not_run(started, time.time(), cancelled=True)
        reader.join(self._spec.timeout_seconds)
        if reader.is_alive():
            timed_out = not self._cancelled.is_set()
            self._kill(cid)
            reader.join(_DRAIN_SECONDS)
            if reader.is_alive():  # a hung stream must not hang the call
                _close(sock)
                reader.join(_DRAIN_SECONDS)
        try:
            status = api.wait(cid, timeout=_DRAIN_SECONDS + 5)
            exit_code = int(status.get("StatusCode", -1))
        except Exception:  # the wait itself timed out: the container is removed anyway
            self._kill(cid)
            exit_code = -1
        finished = time.time()
        state = api.inspect_container(cid).get("State", {})
        _close(sock)
        return Outcome(
            exit_code=exit_code,
            oom_killed=bool(state.get("OOMKilled")),
            timed_out=timed_out,
            cancelled=self._cancelled.is_set(),
            started_at=started,
            finished_at=finished,
        )

    def _read(self, sock) -> None:  # type: ignore[no-untyped-def]
        try:
            for stream, data in frames_iter(sock, tty=False):
                if data:
                    self._on_output("stderr" if stream == 2 else "stdout", data)
        except (OSError, ValueError):
            pass  # the socket was closed under us after a kill: the output ends here

    def _kill(self, cid: str) -> None:
        try:
            self._api.kill(cid)
        except docker.errors.APIError:
            pass  # already exited, or already gone


def _close(sock) -> None:  # type: ignore[no-untyped-def]
    # docker-py hands out a SocketIO, which has no shutdown and whose close leaves the socket
    # open: only shutting down the socket under it wakes a reader blocked on it.
    raw = getattr(sock, "_sock", sock)
    for close in (lambda: raw.shutdown(socket.SHUT_RDWR), sock.close):
        try:
            close()
        except Exception:
            pass
