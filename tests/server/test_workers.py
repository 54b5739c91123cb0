"""`serve --workers 2`: two processes on one port, one decision log that takes both and verifies.

Real parts throughout: the CLI's supervisor forks real workers on a real TCP port, clients on
several connections (the kernel spreads connections, not calls, over SO_REUSEPORT sockets), and
the log is read back from its SQLite file and checked with `warden audit verify`.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from checkpoint.audit import DecisionReader
from checkpoint.audit.heads import heads_path, read_heads
from checkpoint.server.cpu_placement import process_ticks
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc

from .conftest import REPO, TOKEN
from .helpers import BearerAuth, tool_call

CONNECTIONS = 8


def _two_free_ports() -> int:
    """A port p with p+1 free too (worker 1's metrics port is the base + 1), taken below the kernel's
    ephemeral range: a port picked there was free for a moment only, and any process on the machine
    binding port 0 (another test's server, a client's connection) could take p+1 before worker 1
    bound it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10_000, low - 2)
        with socket.socket() as a, socket.socket() as b:
            try:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two adjacent free ports")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _warden(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warden.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def _children(pid: int) -> set[int]:
    return {int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()}


class Cluster:
    def __init__(self, tmp: Path, policies: Path, workers: str = "2", reload: str = "0", extra: tuple[str, ...] = (),
                 cpus: set[int] | None = None, port: int | None = None):
        self.data = tmp / "data"
        if not self.data.exists():
            assert _warden("keys", "init", "--data", str(self.data)).returncode == 0
        (self.data / "checkpoint.tokens").write_text(f"driver {TOKEN}\n")
        self.port = port or _free_port()
        self.metrics = _two_free_ports()
        cmd = [sys.executable, "-m", "warden.cli", "checkpoint", "serve", "--data", str(self.data),
               "--policies", str(policies), "--address", f"127.0.0.1:{self.port}", "--socket", "",
               "--reload-interval", reload, "--reload-settle", "0.2", "--workers", workers, "--metrics-address", f"127.0.0.1:{self.metrics}", *extra]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        self.channels: list[grpc.Channel] = []

    def stub(self) -> pb_grpc.CheckpointServiceStub:
        # a channel of its own is a connection of its own: the kernel picks its worker
        channel = grpc.insecure_channel(f"127.0.0.1:{self.port}", options=[("grpc.use_local_subchannel_pool", 1)])
        self.channels.append(channel)
        return pb_grpc.CheckpointServiceStub(grpc.intercept_channel(channel, BearerAuth(TOKEN)))

    def wait_serving(self, workers: int = 2) -> str:
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, self.proc.stderr.read().decode() if self.proc.stderr else ""
            try:
                if all(self.healthz(i)["status"] == "SERVING" for i in range(workers)):
                    return self.stub().ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5).agent_version
            except (OSError, grpc.RpcError):
                pass
            assert time.monotonic() < deadline, "workers did not start"
            time.sleep(0.2)

    def healthz(self, worker: int) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics + worker}/healthz", timeout=2) as got:
            return json.loads(got.read())

    def decisions_counted(self, worker: int) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics + worker}/metrics", timeout=2) as got:
            text = got.read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("warden_checkpoint_decisions_total{"))

    def stop(self) -> int:
        for channel in self.channels:
            channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


class Load:
    """Clients on CONNECTIONS connections, each starting a run and checking until stopped. Every
    answer received is kept: those are the decisions the log must hold."""

    def __init__(self, cluster: Cluster, version: str):
        self.cluster, self.version = cluster, version
        self.received: list[str] = []
        self.verdicts: set[tuple[int, str]] = set()
        self.errors = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(n,)) for n in range(CONNECTIONS)]

    def _client(self, n: int) -> None:
        token = ""
        i = 0
        while not self.stop.is_set():
            stub = self.cluster.stub()
            try:
                if not token:
                    started = stub.StartRun(pb.StartRunRequest(person="alice", agent="recon", agent_version=self.version,
                                                               mode=pb.RUN_MODE_INTERACTIVE), timeout=10)
                    with self.lock:
                        self.received.append(started.decision.decision_id)
                    token = started.run_token
                    assert token, started.decision
                while not self.stop.is_set():
                    i += 1
                    req = tool_call("recon", self.version, "get_task" if i % 3 else "cancel_task",
                                    {"task_id": f"task-{n}x{i}"})
                    req.run.CopyFrom(pb.RunContext(run_token=token))
                    resp = stub.Check(req, timeout=10)
                    with self.lock:
                        self.received.append(resp.decision_id)
                        self.verdicts.add((resp.verdict, resp.code))
            except grpc.RpcError:
                with self.lock:
                    self.errors += 1  # the worker behind this connection died: a new connection
                time.sleep(0.05)

    def __enter__(self) -> Load:
        for t in self.threads:
            t.start()
        return self

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        start = len(self.received)
        while len(self.received) - start < n:
            assert time.monotonic() < deadline, f"only {len(self.received) - start} of {n} answers"
            time.sleep(0.05)

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def _assert_logged_and_verified(data: Path, received: list[str]) -> None:
    verify = _warden("audit", "verify", "--data", str(data))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    logged = [r["decision_id"] for r in DecisionReader(data / "decisions.db").read()]
    assert len(logged) == len(set(logged)), "a decision recorded twice"
    missing = set(received) - set(logged)
    assert not missing, f"{len(missing)} of {len(received)} answered decisions are not in the log"


@pytest.mark.timeout(240)
def test_two_workers_one_port_one_log_that_verifies(tmp_path, policy_dir):
    cluster = Cluster(tmp_path, policy_dir)
    try:
        version = cluster.wait_serving()
        assert len(_children(cluster.proc.pid)) == 2
        with Load(cluster, version) as load:
            load.wait_for(1500)
        # both workers decided (each counts its own), and both kinds of answer came back
        counted = [cluster.decisions_counted(i) for i in range(2)]
        assert all(c > 0 for c in counted), counted
        assert {(pb.VERDICT_ALLOW, "allowed"), (pb.VERDICT_DENY, "tool_not_allowed")} <= load.verdicts
        assert load.errors == 0
        workers = _children(cluster.proc.pid)
    finally:
        code = cluster.stop()
    assert code == 0, cluster.proc.stderr.read().decode() if cluster.proc.stderr else ""
    assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "SIGTERM left a worker running"
    _assert_logged_and_verified(cluster.data, load.received)
    # the supervisor signed the last head after both workers stopped: it is the log's head
    heads = read_heads(heads_path(cluster.data / "decisions.db"))
    assert heads and (heads[-1].seq, heads[-1].hash) == DecisionReader(cluster.data / "decisions.db").head()


def _affinities(pid: int) -> set[frozenset[int]]:
    """The CPU set of every thread of a process."""
    return {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.timeout(120)
def test_pinned_workers_each_run_on_one_cpu_of_their_own(tmp_path, policy_dir):
    cpus = sorted(os.sched_getaffinity(0))[:2]  # two CPUs, so two workers have one each whatever the machine
    cluster = Cluster(tmp_path, policy_dir, extra=("--pin-cpus",), cpus=set(cpus))
    try:
        version = cluster.wait_serving()
        with Load(cluster, version) as load:
            load.wait_for(50)
        assert load.errors == 0
        workers = _children(cluster.proc.pid)
        # every thread of a worker (gRPC's, the log writer's) on the one CPU; the two on different
        # CPUs when there are two; the supervisor left free
        pinned = [_affinities(pid) for pid in workers]
        assert all(len(sets) == 1 and len(next(iter(sets))) == 1 for sets in pinned), pinned
        # which CPU each takes is the Balancer's answer to the machine's load (two free CPUs: one
        # each; one crowded: both on the other), checked against a load the test decides in
        # tests/server/test_cpu_placement.py and against real load by bench/bench_placement.py
        assert {next(iter(next(iter(sets)))) for sets in pinned} <= set(cpus)
        assert _affinities(cluster.proc.pid) == {frozenset(cpus)}
        # and SCHED_BATCH: a thread woken by another of the worker's does not preempt it
        assert {os.sched_getscheduler(int(t)) for pid in workers for t in os.listdir(f"/proc/{pid}/task")} \
            == {os.SCHED_BATCH}
        assert os.sched_getscheduler(cluster.proc.pid) == os.SCHED_OTHER
    finally:
        assert cluster.stop() == 0
    _assert_logged_and_verified(cluster.data, load.received)


@pytest.mark.timeout(120)
def test_one_pinned_checkpoint_runs_on_one_cpu_in_sched_batch(tmp_path, policy_dir):
    cluster = Cluster(tmp_path, policy_dir, workers="1", extra=("--pin-cpus",))
    try:
        cluster.wait_serving(workers=1)
        sets = _affinities(cluster.proc.pid)
        assert len(sets) == 1 and len(next(iter(sets))) == 1, sets
        assert {os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{cluster.proc.pid}/task")} \
            == {os.SCHED_BATCH}
    finally:
        assert cluster.stop() == 0


def _whole_machine() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or len(cpus) < (os.cpu_count() or 0):
        pytest.skip("needs a test process that may run on every one of at least two online CPUs")
    return cpus


@pytest.mark.timeout(120)
def test_by_default_a_checkpoint_given_one_cpu_of_the_host_pins_itself_there(tmp_path, policy_dir):
    # `--workers auto --pin-cpus auto` (the default) in a cpuset of one CPU, as taskset or
    # `docker run --cpuset-cpus` leaves it: one worker, on that CPU, SCHED_BATCH
    last = _whole_machine()[-1]
    cluster = Cluster(tmp_path, policy_dir, workers="auto", cpus={last})
    try:
        cluster.wait_serving(workers=1)
        assert _affinities(cluster.proc.pid) == {frozenset({last})}
        assert {os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{cluster.proc.pid}/task")} \
            == {os.SCHED_BATCH}
    finally:
        assert cluster.stop() == 0
    assert f"pinned to CPU {last} (--pin-cpus auto)" in cluster.proc.stderr.read().decode()


@pytest.mark.timeout(120)
def test_by_default_two_workers_on_two_cpus_are_pinned_one_each(tmp_path, policy_dir):
    two = set(_whole_machine()[:2])
    cluster = Cluster(tmp_path, policy_dir, workers="2", cpus=two)
    try:
        cluster.wait_serving()
        pinned = [_affinities(pid) for pid in _children(cluster.proc.pid)]
        assert all(len(sets) == 1 and len(next(iter(sets))) == 1 for sets in pinned), pinned
        assert {next(iter(next(iter(sets)))) for sets in pinned} <= two  # which: the machine's load decides
    finally:
        assert cluster.stop() == 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cpus", ["all", "one"])
def test_pin_cpus_off_leaves_workers_to_the_scheduler(tmp_path, policy_dir, cpus):
    whole = _whole_machine()
    given = set(whole) if cpus == "all" else {whole[-1]}
    cluster = Cluster(tmp_path, policy_dir, workers="2", extra=("--pin-cpus", "off"), cpus=given)
    try:
        cluster.wait_serving()
        workers = _children(cluster.proc.pid)
        assert len(workers) == 2
        assert {s for pid in workers for s in _affinities(pid)} == {frozenset(given)}
        assert {os.sched_getscheduler(int(t)) for pid in workers for t in os.listdir(f"/proc/{pid}/task")} \
            == {os.SCHED_OTHER}
    finally:
        assert cluster.stop() == 0


def _wait_on(pid: int, cpu: int, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while _affinities(pid) != {frozenset({cpu})}:
        assert time.monotonic() < deadline, f"still on {_affinities(pid)}, not CPU {cpu}"
        time.sleep(0.2)


class CrowdedCpus:
    """How busy each CPU looks to a Balancer, decided by the test: a named pipe in /proc/stat's
    format, read in place of /proc/stat. Every read gets 1000 more clock ticks per CPU, all of
    them busy on the CPU other work crowds (`crowded`), none on the others. A real /proc/stat
    tells what the rest of the machine does, and on a machine others keep busy every CPU looks
    crowded, so where a worker belongs would depend on them; here it depends on the test alone,
    and each look sees time pass however long the machine takes between two."""

    def __init__(self, path: Path, cpus: list[int], crowded: int):
        self.path, self.cpus, self.crowded = path, cpus, crowded
        os.mkfifo(path)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        busy = dict.fromkeys(self.cpus, 0)
        idle = dict.fromkeys(self.cpus, 0)
        while not self._stop.is_set():
            crowded = self.crowded  # one value per read
            for cpu in self.cpus:
                busy[cpu] += 1000 if cpu == crowded else 0
                idle[cpu] += 0 if cpu == crowded else 1000
            text = "cpu  0 0 0 0 0 0 0 0\n" + "".join(
                f"cpu{cpu} {busy[cpu]} 0 0 {idle[cpu]} 0 0 0 0\n" for cpu in self.cpus)
            # waits for a reader; one that closed before this write lost nothing: the next read
            # gets the next sample, later by the same ticks
            with contextlib.suppress(BrokenPipeError), open(self.path, "w") as pipe:
                pipe.write(text)

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):  # let a writer waiting for a reader go
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            os.read(fd, 1 << 16)
            os.close(fd)
        self._thread.join(10)


PINNED_PROCESS = """
import logging, sys, threading, time
from pathlib import Path
from checkpoint.server.cpu_placement import Balancer, pin_this_process
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
for _ in range(4):  # threads that exist before the pin, as a checkpoint's do
    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
print(pin_this_process(0.5, balancer=Balancer(stat=Path(sys.argv[1]))), flush=True)
threading.Thread(target=time.sleep, args=(600,), daemon=True).start()  # and one started after it
time.sleep(600)
"""


@pytest.mark.timeout(180)
def test_a_pinned_checkpoint_starts_beside_busy_work_and_moves_when_it_is_crowded(tmp_path):
    # the one-process pin (`serve --pin-cpus` with one worker) and its looking thread, as the
    # CLI runs them (test_one_pinned_checkpoint_runs_on_one_cpu_in_sched_batch starts it there)
    first, second = _whole_machine()[:2]
    cpus = CrowdedCpus(tmp_path / "stat", [first, second], crowded=first)
    pinned = subprocess.Popen([sys.executable, "-c", PINNED_PROCESS, str(cpus.path)], cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: os.sched_setaffinity(0, {first, second}))
    try:
        assert pinned.stdout is not None
        assert pinned.stdout.readline().strip() == str(second)  # placed beside the busy CPU
        assert _affinities(pinned.pid) == {frozenset({second})}
        assert {os.sched_getscheduler(int(t)) for t in os.listdir(f"/proc/{pinned.pid}/task")} == {os.SCHED_BATCH}
        cpus.crowded = second  # now other work crowds the checkpoint's CPU
        _wait_on(pinned.pid, first)  # every thread moved, those started after the pin too
    finally:
        pinned.kill()
        _, err = pinned.communicate(timeout=30)
        cpus.close()  # after: a look waiting on the pipe must not outlive the writer
    assert f"the checkpoint moved from CPU {second} to CPU {first}" in err, err


SLEEPING_SUPERVISOR = """
import sys, time
from pathlib import Path
from checkpoint.server.cpu_placement import Balancer
from checkpoint.server.workers import Supervisor
balancer = Balancer(stat=Path(sys.argv[1]))
raise SystemExit(Supervisor(1, lambda index: time.sleep(600) or 0, balancer=balancer, rebalance_interval=0.5).run())
"""


@pytest.mark.timeout(180)
def test_the_supervisor_moves_a_crowded_worker(tmp_path):
    # the supervisor's own loop, with a worker that only sleeps (one worker, so it has a CPU to go to)
    first, second = _whole_machine()[:2]
    cpus = CrowdedCpus(tmp_path / "stat", [first, second], crowded=first)
    supervisor = subprocess.Popen([sys.executable, "-c", SLEEPING_SUPERVISOR, str(cpus.path)], cwd=REPO,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {first, second}))
    try:
        deadline = time.monotonic() + 60
        while not _children(supervisor.pid):
            assert time.monotonic() < deadline, "no worker"
            time.sleep(0.1)
        (worker,) = _children(supervisor.pid)
        _wait_on(worker, second)  # placed beside the busy CPU (the pin lands once the fork runs)
        # the policy is set just after the pin, task by task: a look between the two sees the pin only
        deadline = time.monotonic() + 10
        while os.sched_getscheduler(worker) != os.SCHED_BATCH:
            assert time.monotonic() < deadline, "pinned, but never given SCHED_BATCH"
            time.sleep(0.05)
        cpus.crowded = second
        _wait_on(worker, first)
        assert _children(supervisor.pid) == {worker}  # moved, not restarted
    finally:
        supervisor.terminate()
        code = supervisor.wait(timeout=60)
        cpus.close()  # after: a look waiting on the pipe must not outlive the writer
    assert code == 0


@pytest.mark.timeout(300)
def test_sigkill_of_one_worker_under_load_loses_no_answered_record(tmp_path, policy_dir):
    cluster = Cluster(tmp_path, policy_dir)
    try:
        version = cluster.wait_serving()
        with Load(cluster, version) as load:
            load.wait_for(800)
            # the busier worker: it holds connections with calls in flight (the kernel may have put
            # every connection on one worker, and killing the idle one would cut nothing)
            victim = max(_children(cluster.proc.pid), key=process_ticks)
            os.kill(victim, signal.SIGKILL)
            load.wait_for(800)  # the other worker (and the restarted one) go on answering
            deadline = time.monotonic() + 60
            while len(_children(cluster.proc.pid) - {victim}) < 2:  # the supervisor started a new one
                assert time.monotonic() < deadline, "the killed worker was not restarted"
                time.sleep(0.2)
        assert load.errors > 0, "no call was cut by the kill: the test proved nothing"
    finally:
        code = cluster.stop()
    assert code == 0
    _assert_logged_and_verified(cluster.data, load.received)


def test_a_port_already_served_is_refused(tmp_path, policy_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        data = tmp_path / "data"
        assert _warden("keys", "init", "--data", str(data)).returncode == 0
        got = _warden("checkpoint", "serve", "--data", str(data), "--policies", str(policy_dir),
                      "--address", f"127.0.0.1:{port}", "--socket", "", "--workers", "2")
    assert got.returncode == 2 and "cannot serve" in got.stderr, got.stderr


@pytest.mark.parametrize("value", ["0", "65", "many", "-1"])
def test_bad_worker_counts_are_refused(tmp_path, value):
    got = _warden("checkpoint", "serve", "--data", str(tmp_path / "d"), "--workers", value)
    assert got.returncode == 2 and "--workers" in got.stderr, got.stderr


def test_workers_that_keep_failing_at_start_stop_the_checkpoint(tmp_path, policy_dir):
    """A broken data folder must not become a restart loop: the supervisor stops all, exit 2."""
    data = tmp_path / "data"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    (data / "checkpoint.tokens").write_text(f"driver {TOKEN}\n")
    (data / "decisions.db").write_bytes(b"this is not a SQLite database" * 100)
    got = _warden("checkpoint", "serve", "--data", str(data), "--policies", str(policy_dir),
                  "--address", f"127.0.0.1:{_free_port()}", "--socket", "", "--workers", "2")
    assert got.returncode == 2, got.stderr
    assert "times in a row: stopping" in got.stderr, got.stderr


def test_a_worker_that_cannot_start_says_why_in_one_line(tmp_path, policy_dir):
    """One checkpoint says `cannot start the checkpoint: ... '/nope.key'`; its workers printed a
    traceback each, three times over, and the cause was a line among forty."""
    data = tmp_path / "data"
    assert _warden("keys", "init", "--data", str(data)).returncode == 0
    got = _warden("checkpoint", "serve", "--data", str(data), "--policies", str(policy_dir), "--address",
                  f"127.0.0.1:{_free_port()}", "--socket", "", "--workers", "2", "--tls-cert", str(tmp_path / "no.pem"),
                  "--tls-key", str(tmp_path / "no.key"), "--tls-client-ca", str(tmp_path / "no.ca"))
    assert got.returncode == 2, got.stderr
    assert "Traceback" not in got.stderr, got.stderr
    assert f"cannot start: [Errno 2] No such file or directory: '{tmp_path / 'no.key'}'" in got.stderr, got.stderr


@pytest.mark.timeout(240)
def test_a_policy_edit_reaches_every_worker(tmp_path, policy_dir):
    cluster = Cluster(tmp_path, policy_dir, reload="0.5")
    try:
        cluster.wait_serving()
        before = {cluster.healthz(i)["policy_revision"] for i in range(2)}
        assert len(before) == 1 and "" not in before
        tool = policy_dir / "tools" / "get_task.yaml"
        tool.write_text(tool.read_text().replace("Read a task's status and result.", "Read a task."))
        deadline = time.monotonic() + 60
        while True:
            now = [cluster.healthz(i)["policy_revision"] for i in range(2)]
            if len(set(now)) == 1 and set(now) != before:
                break
            assert time.monotonic() < deadline, f"revisions {now}, before {before}"
            time.sleep(0.2)
    finally:
        assert cluster.stop() == 0


@pytest.mark.timeout(240)
def test_workers_stop_when_the_supervisor_is_killed(tmp_path, policy_dir):
    """No orphans serving on after a SIGKILL of the supervisor (nobody would restart or sign)."""
    cluster = Cluster(tmp_path, policy_dir)
    workers: set[int] = set()
    try:
        cluster.wait_serving()
        workers = _children(cluster.proc.pid)
        assert len(workers) == 2
        os.kill(cluster.proc.pid, signal.SIGKILL)
        cluster.proc.wait(timeout=10)
        deadline = time.monotonic() + 60
        while [pid for pid in workers if _running(pid)]:
            assert time.monotonic() < deadline, "workers outlived their supervisor"
            time.sleep(0.2)
    finally:
        cluster.stop()
        for pid in workers:
            if _running(pid):  # the test failed: leave no orphan behind
                os.kill(pid, signal.SIGKILL)
    verify = _warden("audit", "verify", "--data", str(cluster.data))
    assert verify.returncode == 0, verify.stdout + verify.stderr


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init to reap it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _time_wait_on(host: str, family: socket.AddressFamily) -> int:
    """A port whose listener is gone and whose last connection the server side closed first: the
    kernel keeps that connection in TIME_WAIT for a minute, as it does after a checkpoint stopped
    under load."""
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's own listeners
        listener.bind((host, 0))
        listener.listen()
        port = listener.getsockname()[1]
        with socket.socket(family, socket.SOCK_STREAM) as client:
            client.connect((host, port))
            served, _ = listener.accept()
            served.close()  # the server closes first: its side goes to TIME_WAIT
            assert client.recv(1) == b""  # the close reached the client
    return port


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_a_port_left_in_time_wait_is_claimed_at_once(host):
    from checkpoint.server.workers import claim_port

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    port = _time_wait_on(host, family)
    address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
    assert claim_port(address) == address


@pytest.mark.parametrize("options", [(), (socket.SO_REUSEADDR,), (socket.SO_REUSEADDR, socket.SO_REUSEPORT)])
def test_a_port_another_listener_serves_is_still_refused(options):
    # SO_REUSEADDR lets the claim past connections in TIME_WAIT, never past a live listener,
    # however that listener was bound (a checkpoint's workers bind with both options)
    from checkpoint.server.workers import claim_port

    with socket.socket() as taken:
        for option in options:
            taken.setsockopt(socket.SOL_SOCKET, option, 1)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match="cannot serve"):
            claim_port(f"127.0.0.1:{taken.getsockname()[1]}")


def _time_waits(port: int) -> int:
    """Connections of local port `port` in TIME_WAIT (state 06 in /proc/net/tcp and tcp6)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "06":
                count += 1
    return count


@pytest.mark.timeout(300)
def test_a_checkpoint_stopped_under_load_restarts_on_its_port_at_once(tmp_path, policy_dir):
    cluster = Cluster(tmp_path, policy_dir)
    try:
        version = cluster.wait_serving()
        with Load(cluster, version) as load:
            load.wait_for(200)
            # the workers close the clients' open connections first: their side goes to TIME_WAIT
            cluster.proc.send_signal(signal.SIGTERM)
            assert cluster.proc.wait(timeout=60) == 0
    finally:
        cluster.stop()
    assert _time_waits(cluster.port), "no connection in TIME_WAIT: the test proved nothing"
    started = time.monotonic()
    again = Cluster(tmp_path, policy_dir, port=cluster.port)
    try:
        again.wait_serving()
        # measured, not asserted (the machine may be busy): a claim refused by TIME_WAIT waited a minute
        print(f"restarted and serving after {time.monotonic() - started:.2f} s")
    finally:
        assert again.stop() == 0


def _epolls(pid: int) -> list[int]:
    """The descriptors of a process that are epoll instances (gRPC's pollers)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[eventpoll]":
                found.append(int(fd))
    return found


def _same_file(pid1: int, fd1: int, pid2: int, fd2: int) -> bool:
    """kcmp(2): do two descriptors of two processes refer to one open file (one epoll instance)?"""
    import ctypes
    import platform

    if platform.machine() != "x86_64":
        pytest.skip("kcmp's syscall number is known here for x86_64 only")
    libc = ctypes.CDLL(None, use_errno=True)
    got = libc.syscall(312, pid1, pid2, 0, fd1, fd2)  # SYS_kcmp, KCMP_FILE
    if got < 0:
        pytest.skip(f"kcmp refused: {os.strerror(ctypes.get_errno())}")
    return got == 0


@pytest.mark.timeout(240)
def test_workers_never_share_a_grpc_poller_with_the_supervisor_or_each_other(tmp_path, policy_dir):
    """The supervisor forks: it must hold no gRPC state when it does. With traces exported over
    OTLP/gRPC it made the exporter's channel before forking, so gRPC ran in the supervisor and
    every fork went through gRPC's fork handlers, which skip their reset when another thread
    is inside gRPC at that moment; the child then polls the parent's epoll instance. Traces are
    now set up in each worker: the supervisor runs no gRPC, and no two processes share a poller."""
    cluster = Cluster(tmp_path, policy_dir, extra=("--otlp-endpoint", "http://127.0.0.1:9"))
    try:
        cluster.wait_serving()
        workers = sorted(_children(cluster.proc.pid))
        assert len(workers) == 2
        polls = {pid: _epolls(pid) for pid in [cluster.proc.pid, *workers]}
        assert all(polls[pid] for pid in workers), polls  # each worker runs gRPC
        assert not polls[cluster.proc.pid], f"gRPC runs in the supervisor: {polls}"
        shared = [(a, fa, b, fb) for i, a in enumerate(polls) for b in list(polls)[i + 1:]
                  for fa in polls[a] for fb in polls[b] if _same_file(a, fa, b, fb)]
        assert not shared, f"one epoll instance in two processes: {shared}"
    finally:
        code = cluster.stop()
    err = cluster.proc.stderr.read().decode() if cluster.proc.stderr else ""
    assert code == 0 and "epoll_wait" not in err, err

