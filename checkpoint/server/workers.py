"""`serve --workers N`: several checkpoint processes on one port, and the supervisor that keeps them.

One Python process spends most of a Check holding the GIL (grpcio's server layer, the decision,
the grant, the record), so one process uses about one core however many threads it runs. N
workers are N processes, each a whole checkpoint (create_server with `shared=True`): the kernel
spreads connections over them (SO_REUSEPORT), they load the same policy folder and reload it on
their own, and they share the data folder:

- the decision log: one file, one chain; writers take turns under a file lock (audit/log.py), and
  each still commits a record before its answer leaves;
- approvals-used.db: single use is a primary key, so it holds across processes as it did across
  threads; catalog.db and learnings.db: acts lock the file (warden/filelock.py), and every worker
  sees another's act before its next decision (shared_state.py);
- signed heads: only the supervisor signs (every `head_interval`, and once all workers stopped),
  so heads come from one place, in order, and the last one covers every worker's last record.

With `--pin-cpus` (auto, the default, when every worker can have a CPU of its own), each worker
runs on one CPU, the one other work leaves most free, and the supervisor moves a worker that other
work crowds (checkpoint/server/cpu_placement.py, which says why pinning pays).

Per worker: its metrics (`--metrics-address HOST:PORT` gives worker i PORT+i), its refusal rate
limiter, its gRPC threads. The Unix socket is worker 0's (a socket path has no SO_REUSEPORT).

The supervisor runs no gRPC at all, before or after it forks (grpcio's multiprocessing pattern:
gRPC's fork handlers skip their reset when another thread is inside gRPC at the fork, and the
child then polls the parent's epoll instance); so traces (an OTLP/gRPC exporter) are set up in
each worker (`worker_context`), never in the supervisor. It restarts a worker that dies, gives up (stopping all, exit 2) when a worker keeps dying
right after it starts, forwards SIGTERM/SIGINT to every worker, waits for them, signs the last
head and exits. Workers get SIGTERM if the supervisor itself is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.server import cpu_placement
from warden.cli import DEFAULT_GRACE, STOP_MARGIN

log = logging.getLogger("warden.checkpoint.workers")

MAX_WORKERS = 64
QUICK_EXIT_SECONDS = 5.0  # a worker that dies this soon after its start failed to start ...
QUICK_EXITS_ALLOWED = 3  # ... and this many such deaths in a row stop the whole checkpoint
# a bad file, port or setting (checkpoint/server_cli.py prints these as one line with one worker)
STARTUP_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, RuntimeError, AuditUnavailable)


def worker_count(text: str) -> int:
    """`auto` (one per CPU this process may use, see usable_cpus) or a number from 1 to 64."""
    if text == "auto":
        return max(1, min(MAX_WORKERS, cpu_placement.usable_cpus()))
    try:
        n = int(text)
    except ValueError:
        raise ValueError(f"--workers: expected a number or 'auto', got {text!r}") from None
    if not 1 <= n <= MAX_WORKERS:
        raise ValueError(f"--workers: expected 1 to {MAX_WORKERS}, got {n}")
    return n


def _split(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def claim_port(address: str) -> str:
    """The address with a concrete port, after checking nobody serves it.

    A bind without SO_REUSEPORT fails when anything listens there, so a second checkpoint
    cannot join this one's port and take half its traffic unnoticed. It is made with
    SO_REUSEADDR, as gRPC binds its own listeners: after a stop under load the port's closed
    connections stay in TIME_WAIT for a minute, and they must not keep a restart from serving
    (SO_REUSEADDR never lets a bind past a live listener). Port 0 is resolved here, once, so
    every worker binds the same port.
    """
    host, port = _split(address)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise OSError(f"cannot serve {address}: {exc.strerror or exc}") from None
        port = probe.getsockname()[1]
    return f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"


def _metrics_for(address: str | None, index: int) -> str | None:
    if not address:
        return None
    host, port = _split(address)
    return f"{host}:{port + index if port else 0}"


def _die_with_parent() -> None:
    """SIGTERM this process when the supervisor dies, even by SIGKILL (Linux prctl)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    def __init__(
        self,
        count: int,
        run_worker: Callable[[int], int],
        *,
        sign_head: Callable[[], Any] | None = None,
        head_interval: float | None = None,
        stop_wait: float = DEFAULT_GRACE + STOP_MARGIN,
        balancer: cpu_placement.Balancer | None = None,
        rebalance_interval: float = cpu_placement.REBALANCE_INTERVAL,
    ):
        self._stop_wait = stop_wait
        self._balancer = balancer
        self._rebalance_interval = rebalance_interval
        self.count = count
        self._run_worker = run_worker
        self._sign_head = sign_head
        self._head_interval = head_interval
        self._pids: dict[int, int] = {}  # pid -> worker index
        self._started: dict[int, float] = {}  # worker index -> when its current process started
        self._quick_exits = 0
        self._stopping = False

    def _spawn(self, index: int) -> None:
        cpu = self._balancer.choose() if self._balancer else None
        pid = os.fork()
        if pid == 0:  # the worker
            code = 2
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with_parent()
                if cpu is not None:  # before any gRPC thread exists, so every thread of the worker inherits it
                    try:
                        cpu_placement.pin(os.getpid(), cpu, batch=True)
                        log.info("worker %d pinned to CPU %d", index, cpu)
                    except OSError as exc:  # a sandbox that refuses affinity: slower, not wrong
                        log.warning("worker %d not pinned: %s", index, exc)
                code = self._run_worker(index)
            except STARTUP_ERRORS as exc:  # what `serve` with one worker prints as one line, so here too
                log.error("worker %d cannot start: %s", index, exc)
            except BaseException:  # noqa: BLE001 - a worker reports and exits; never returns into the supervisor
                log.exception("worker %d failed", index)
            finally:
                logging.shutdown()
                # _HELD still holds the worker's gRPC server: gRPC is never torn down here, where
                # its teardown would close the epoll instance its poller threads may still be in
                os._exit(code)
        self._pids[pid] = index
        self._started[index] = time.monotonic()
        if self._balancer and cpu is not None:
            self._balancer.place(pid, cpu)
        log.info("worker %d started (pid %d)", index, pid)

    def run(self) -> int:
        def stop(signum: int, _frame: Any) -> None:
            self._stopping = True

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        if self._balancer and not cpu_placement.start(self._balancer):
            self._balancer = None  # /proc unreadable: the workers run unpinned
        for index in range(self.count):
            self._spawn(index)
        next_head = time.monotonic() + (self._head_interval or 0)
        next_look = time.monotonic() + cpu_placement.jittered(self._rebalance_interval)
        code = 0
        while not self._stopping:
            time.sleep(0.2)
            if self._reap_and_restart():
                code = 2
                break
            if self._head_interval and time.monotonic() >= next_head:
                next_head = time.monotonic() + self._head_interval
                self._head()
            if self._balancer and self._rebalance_interval > 0 and time.monotonic() >= next_look:
                next_look = time.monotonic() + cpu_placement.jittered(self._rebalance_interval)
                self._look()
        self._stop_all()
        self._head()  # after every worker closed its log: covers each one's last record
        return code

    def _look(self) -> None:
        assert self._balancer is not None
        try:
            moves = self._balancer.look()
        except (OSError, ValueError, IndexError) as exc:  # /proc unreadable: the workers stay where they are
            log.warning("CPU placement stops looking: %s", exc)
            self._rebalance_interval = 0
            return
        cpu_placement.log_moves(moves, {pid: f"worker {i} (pid {pid})" for pid, i in self._pids.items()})

    def _reap_and_restart(self) -> bool:
        """Restart workers that died. True when they keep failing to start: time to give up."""
        while self._pids:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return True
            if pid == 0:
                return False
            index = self._pids.pop(pid, None)
            if self._balancer:
                self._balancer.forget(pid)
            if index is None:
                continue
            lived = time.monotonic() - self._started[index]
            how = _how(status)
            if self._stopping:
                if status != 0:
                    log.error("worker %d (pid %d) ended by %s at stop", index, pid, how)
                continue
            self._quick_exits = self._quick_exits + 1 if lived < QUICK_EXIT_SECONDS else 0
            if self._quick_exits >= QUICK_EXITS_ALLOWED:
                log.error("worker %d (pid %d) ended by %s %.1f s after its start, %d times in a row: stopping",
                          index, pid, how, lived, self._quick_exits)
                return True
            log.error("worker %d (pid %d) ended by %s; starting it again", index, pid, how)
            self._spawn(index)
        return False

    def _stop_all(self) -> None:
        for pid in list(self._pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self._stop_wait
        while self._pids and time.monotonic() < deadline:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                time.sleep(0.05)
            else:
                index = self._pids.pop(pid, None)
                if status != 0:  # an abort at stop must be seen, not taken for a clean end
                    log.error("worker %s (pid %d) ended by %s at stop", index, pid, _how(status))
        for pid in list(self._pids):
            log.error("worker pid %d did not stop within %.0f s: killing it", pid, self._stop_wait)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self._pids.clear()

    def _head(self) -> None:
        if self._sign_head is None:
            return
        try:
            self._sign_head()
        except Exception:  # a failed signature must not stop the supervisor
            log.exception("signing the decision log's head failed")


def _how(status: int) -> str:
    return (f"signal {-os.waitstatus_to_exitcode(status)}" if os.WIFSIGNALED(status)
            else f"exit code {os.waitstatus_to_exitcode(status)}")


def _tag_logs(index: int) -> None:
    """Every line a worker logs names the worker: in the text format, and as a `worker` field in JSON."""
    from warden.logsetup import JsonFormatter

    def tag(record: logging.LogRecord) -> bool:
        record.worker = index
        return True

    for handler in logging.getLogger().handlers:
        handler.addFilter(tag)
        if not isinstance(handler.formatter, JsonFormatter):
            handler.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)s worker {index} %(name)s: %(message)s"))


# In a worker: what must live until its os._exit (its gRPC server)
_HELD: list[Any] = []


def serve_workers(count: int, *, address: str | None, uds_path: str | Path | None,
                  metrics_address: str | None, data_dir: str | Path,
                  head_interval: float | None, pin_cpus: bool = False,
                  rebalance_interval: float = cpu_placement.REBALANCE_INTERVAL,
                  worker_context: Callable[[], contextlib.AbstractContextManager[Any]] | None = None,
                  **kwargs: Any) -> int:
    """Run `count` workers (see the module docstring) until SIGTERM or SIGINT. `worker_context`:
    entered in each worker around its whole life (its tracing)."""
    from checkpoint.audit.heads import HeadSigner
    from checkpoint.audit.reader import DecisionReader
    from checkpoint.audit.record import GENESIS_HASH
    from checkpoint.server.app import serve
    from checkpoint.server.stores import store_url

    if not address:
        raise ValueError("--workers above 1 needs a TCP --address (a Unix socket cannot be shared)")
    address = claim_port(address)
    log_path = Path(data_dir) / "decisions.db"

    store = kwargs.get("store")
    shared_log = store_url(store, data_dir).is_postgresql if store else False

    def head() -> tuple[int, str]:
        if shared_log:  # the workers write the table a fleet shares: its head is the one to sign
            from checkpoint.audit.backends import fleet_head

            return fleet_head(store_url(store, data_dir)) or (0, GENESIS_HASH)
        if not log_path.exists():
            return 0, GENESIS_HASH
        return DecisionReader(log_path).head() or (0, GENESIS_HASH)

    signer = HeadSigner(head, log_path, interval=None)  # makes the key now, before any worker races to

    def run_worker(index: int) -> int:
        _tag_logs(index)
        with worker_context() if worker_context else contextlib.nullcontext():
            return serve(address=address, uds_path=uds_path if index == 0 else None,
                         metrics_address=_metrics_for(metrics_address, index), data_dir=data_dir,
                         head_interval=None, shared=True, hold=_HELD, **kwargs)

    cpus = cpu_placement.usable_cpus()
    if count > cpus:  # `--workers` counted gRPC threads before it counted processes
        log.warning("%d workers on %d CPUs: more processes than CPUs only adds memory and switching "
                    "(gRPC threads per worker are --threads)", count, cpus)
    log.info("checkpoint serving on %s with %d workers", address, count)
    print(f"checkpoint: serving on {address} with {count} workers", file=sys.stderr, flush=True)
    # a worker drains its calls for up to --grace seconds after SIGTERM: wait that long before SIGKILL
    stop_wait = float(kwargs.get("grace", DEFAULT_GRACE)) + STOP_MARGIN
    # the supervisor is never pinned: its own CPU set is the workers' at every look (a cpuset can shrink)
    balancer = cpu_placement.Balancer(allowed=lambda: os.sched_getaffinity(0)) if pin_cpus else None
    return Supervisor(count, run_worker, sign_head=signer.sign_now, head_interval=head_interval,
                      stop_wait=stop_wait, balancer=balancer, rebalance_interval=rebalance_interval).run()
