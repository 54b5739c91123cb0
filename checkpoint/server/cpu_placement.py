"""Where the checkpoint's processes run: how many CPUs it may use, and the CPU each one is pinned to.

One Python process spends most of a Check holding the GIL and hands it between its threads
several times per call (gRPC's poller, the handler thread, the log's writer). Pinned to one CPU,
each hand-off is a wake-up on the same core with warm caches instead of a cross-core one, and in
SCHED_BATCH a woken thread waits for the waker's time slice instead of preempting the thread that
holds the GIL it needs next. Measured on the 2-core machine this was built on: about 1.5-2x the
calls/s at c=32 with a quarter less CPU per call (docs/checkpoint-service.md, "Workers").

A pin must not strand a worker on a core other work keeps busy, nor put every checkpoint of a
host on its first CPU. So a worker is placed on the CPU other work leaves most free, and the
Balancer looks again every few seconds: a CPU is as busy as /proc/stat says, less what our own
workers spent on it (/proc/PID/stat); each of our other workers there counts as a whole CPU. A
worker whose CPU carries `margin` more of that load than the freest CPU, `patience` looks in a
row, moves there, every thread of it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("warden.checkpoint.cpus")

REBALANCE_INTERVAL = 2.0  # seconds between looks
MARGIN = 0.35  # of a CPU: less is noise, not a reason to move
PATIENCE = 2  # looks in a row before a worker moves
TIE = 0.05  # CPUs this close to the freest are equally free: pick one at random, so checkpoints spread


# ---- how many -------------------------------------------------------------------------------


def _quota(node: Path, v2: bool) -> int | None:
    """The whole CPUs (rounded up) one cgroup's quota allows; None for none or an unreadable file."""
    try:
        if v2:
            quota, period = (node / "cpu.max").read_text().split()
            if quota == "max":
                return None
        else:
            quota = (node / "cpu.cfs_quota_us").read_text().strip()
            period = (node / "cpu.cfs_period_us").read_text().strip()
            if int(quota) < 0:
                return None
        return max(1, math.ceil(int(quota) / int(period)))
    except (OSError, ValueError, ZeroDivisionError):
        return None


def cpu_limit(mountinfo: Path = Path("/proc/self/mountinfo"), self_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The CPUs this process's cgroup CPU quota allows, rounded up (`docker run --cpus`, a
    Kubernetes CPU limit): the smallest quota from its cgroup up to the top of what is mounted
    here, cgroup v2 (cpu.max) or v1 (cpu.cfs_quota_us). None when no quota applies.

    Its cgroup's folder is found as the kernel names it: /proc/self/cgroup gives the path, and the
    cgroup mount in /proc/self/mountinfo gives the part of the tree mounted and where (a container
    often sees its own cgroup mounted as the top)."""
    try:
        groups, mounts = self_cgroup.read_text().splitlines(), mountinfo.read_text().splitlines()
    except OSError:
        return None
    paths: dict[str, str] = {}  # controller ("" is cgroup v2's single tree) -> this process's path
    for line in groups:
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(","):
                paths[controller] = parts[2]
    limits: list[int] = []
    for line in mounts:
        mount, _, fs = line.partition(" - ")
        fields, fs_fields = mount.split(), fs.split()
        if len(fields) < 5 or len(fs_fields) < 3:
            continue
        v2 = fs_fields[0] == "cgroup2"
        if not v2 and not (fs_fields[0] == "cgroup" and "cpu" in fs_fields[2].split(",")):
            continue
        path = paths.get("" if v2 else "cpu")
        if path is None:
            continue
        inside = os.path.relpath(path, fields[3])
        if inside.startswith(".."):  # this mount shows another part of the tree
            continue
        top = Path(fields[4])
        node = top / inside
        while True:
            quota = _quota(node, v2)
            if quota is not None:
                limits.append(quota)
            if node == top or top not in node.parents:
                break
            node = node.parent
    return min(limits) if limits else None


def usable_cpus() -> int:
    """CPUs this process may run on, bounded by its cgroup's CPU quota."""
    cpus = len(os.sched_getaffinity(0))
    limit = cpu_limit()
    return cpus if limit is None else min(cpus, limit)


def should_pin(mode: str, workers: int) -> bool:
    """`--pin-cpus` auto|on|off: auto pins when every worker can have a CPU of its own."""
    return mode == "on" or (mode == "auto" and workers <= len(os.sched_getaffinity(0)))


# ---- where ----------------------------------------------------------------------------------


def cpu_busy(stat: Path = Path("/proc/stat")) -> dict[int, tuple[int, int]]:
    """Per CPU, (busy, all) clock ticks since boot. Busy counts steal: time a hypervisor gave
    another guest is time this CPU did not run ours."""
    busy: dict[int, tuple[int, int]] = {}
    for line in stat.read_text().splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu":
            continue
        ticks = [int(x) for x in rest.split()[:8]]
        ticks += [0] * (8 - len(ticks))
        user, nice, system, idle, iowait, irq, softirq, steal = ticks
        spent = user + nice + system + irq + softirq + steal
        busy[int(name[3:])] = (spent, spent + idle + iowait)
    return busy


def process_ticks(pid: int, proc: Path = Path("/proc")) -> int:
    """User + system clock ticks of every thread of a process so far; 0 once it is gone."""
    try:
        text = (proc / str(pid) / "stat").read_text()
    except OSError:
        return 0
    after = text[text.rindex(")") + 2:].split()  # the name may hold spaces and parentheses
    return int(after[11]) + int(after[12])  # fields 14 and 15 of proc(5)


def pin(pid: int, cpu: int, *, batch: bool = False) -> None:
    """Every thread of process `pid` onto one CPU (threads it starts later inherit it); OSError
    when the system refuses. Twice over the thread list: a thread started during the first pass
    is caught by the second. Then, when `batch`, SCHED_BATCH for each, where the system allows it
    (a sandbox may accept the CPU and refuse the policy: the pin stands)."""
    for _ in range(2):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(task), {cpu})
    if batch:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setscheduler(int(task), os.SCHED_BATCH, os.sched_param(0))
            except ProcessLookupError:
                continue
            except OSError as exc:
                log.warning("SCHED_BATCH refused (%s): pinned, in the default policy", exc)
                return


def threads_on(pid: int) -> set[frozenset[int]]:
    """The CPU sets of a process's threads (one set when they are all pinned alike)."""
    sets: set[frozenset[int]] = set()
    with contextlib.suppress(FileNotFoundError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):
                sets.add(frozenset(os.sched_getaffinity(int(task))))
    return sets


def plan(foreign: Mapping[int, float], placed: Mapping[int, int], strikes: dict[int, int],
         *, margin: float = MARGIN, patience: int = PATIENCE, pick: Callable[[list[int]], int] = random.choice,
         ) -> dict[int, int]:
    """The moves (worker -> CPU) this look calls for. `foreign` is each allowed CPU's share kept
    busy by other work (0-1), `placed` each worker's CPU, `strikes` how many looks in a row each
    worker has had a reason to move (updated here). A worker's load on a CPU is its foreign share
    plus one for each of our other workers there. A worker on a CPU it may no longer use moves at
    once. Among near-equal targets one is picked at random (`pick`), so two checkpoints of a host
    looking at the same moment do not both make the same move, again and again."""
    placed = dict(placed)
    moves: dict[int, int] = {}
    if not foreign:
        return moves
    # the worst placed first, so two workers do not both take the one free CPU
    for worker in sorted(placed, key=lambda w: -foreign.get(placed[w], 2.0)):
        here = placed[worker]

        def load(cpu: int, worker: int = worker) -> float:
            return foreign[cpu] + sum(1 for w, c in placed.items() if c == cpu and w != worker)

        low = min(load(cpu) for cpu in foreign)
        if here not in foreign:  # offline, or no longer in the process's CPU set
            strikes[worker] = patience
        elif load(here) - low > margin:
            strikes[worker] = strikes.get(worker, 0) + 1
        else:
            strikes[worker] = 0
        if strikes[worker] >= patience:
            moves[worker] = placed[worker] = pick(sorted(cpu for cpu in foreign if load(cpu) - low <= TIE))
            strikes[worker] = 0
    return moves


@dataclass
class Balancer:
    """Places pinned processes on the freest CPUs and moves them when other work crowds them.

    `allowed` gives the CPUs the processes may use, asked at every look (a cpuset can shrink); by
    default the CPUs this process could run on when the Balancer was made. Only CPUs that
    /proc/stat also shows (online) are used."""

    allowed: Callable[[], Iterable[int]] = field(default_factory=lambda: _fixed(os.sched_getaffinity(0)))
    placed: dict[int, int] = field(default_factory=dict)  # pid -> CPU
    margin: float = MARGIN
    patience: int = PATIENCE
    stat: Path = Path("/proc/stat")
    proc: Path = Path("/proc")
    foreign: dict[int, float] = field(default_factory=dict)  # the last look's shares
    _strikes: dict[int, int] = field(default_factory=dict)
    _busy: dict[int, tuple[int, int]] | None = None
    _ours: dict[int, int] = field(default_factory=dict)  # pid -> its ticks at the last sample

    def sample(self) -> dict[int, float] | None:
        """Each allowed, online CPU's share kept busy by other work since the last sample (None at
        the first: it only starts the count). Also kept as `foreign`."""
        busy_now = cpu_busy(self.stat)
        ours_now = {pid: process_ticks(pid, self.proc) for pid in self.placed}
        busy_then, self._busy = self._busy, busy_now
        ours_then, self._ours = self._ours, ours_now
        if busy_then is None:
            return None
        foreign: dict[int, float] = {}
        for cpu in set(self.allowed()):
            if cpu not in busy_now or cpu not in busy_then:
                continue
            spent = busy_now[cpu][0] - busy_then[cpu][0]
            ours = sum(ours_now[pid] - ours_then.get(pid, 0) for pid, c in self.placed.items() if c == cpu)
            elapsed = busy_now[cpu][1] - busy_then[cpu][1]
            foreign[cpu] = min(1.0, max(0.0, (spent - ours) / elapsed)) if elapsed > 0 else 0.0
        self.foreign = foreign
        return foreign

    def choose(self) -> int:
        """The CPU for a new process, by the last look: the least loaded (other work, plus one for
        each process of ours there), at random among the near-equal."""
        cpus = sorted(self.foreign) or sorted(self.allowed())

        def load(cpu: int) -> float:
            return self.foreign.get(cpu, 0.0) + sum(1 for c in self.placed.values() if c == cpu)

        low = min(load(cpu) for cpu in cpus)
        return random.choice([cpu for cpu in cpus if load(cpu) - low <= TIE])

    def place(self, pid: int, cpu: int) -> None:
        """Counts `pid` as ours on `cpu` from now: the ticks it has already spent are not the next
        look's."""
        self.placed[pid] = cpu
        self._ours[pid] = process_ticks(pid, self.proc)

    def forget(self, pid: int) -> None:
        self.placed.pop(pid, None)
        self._strikes.pop(pid, None)
        self._ours.pop(pid, None)

    def look(self) -> dict[int, tuple[int, int, float]]:
        """One look: moves the processes other work crowds, and re-pins a thread that escaped
        its process's CPU. Returns pid -> (from, to, the foreign share of `from`) per move made;
        a move the system refuses is not made (and is logged)."""
        foreign = self.sample()
        if foreign is None:
            return {}
        moved: dict[int, tuple[int, int, float]] = {}
        for pid, cpu in plan(foreign, self.placed, self._strikes, margin=self.margin, patience=self.patience).items():
            try:
                pin(pid, cpu)
            except OSError as exc:
                log.warning("pid %d stays on CPU %d: moving it to CPU %d was refused: %s", pid, self.placed[pid], cpu, exc)
                continue
            moved[pid] = (self.placed[pid], cpu, foreign.get(self.placed[pid], 1.0))
            self.placed[pid] = cpu
        for pid, cpu in self.placed.items():
            if pid not in moved and threads_on(pid) - {frozenset({cpu})}:
                with contextlib.suppress(OSError):
                    pin(pid, cpu)
        return moved


def _fixed(cpus: Iterable[int]) -> Callable[[], list[int]]:
    frozen = sorted(cpus)
    return lambda: frozen


def start(balancer: Balancer, seconds: float = 0.1) -> bool:
    """A short first look at how busy other work keeps each CPU, to place the first processes by.
    False when /proc cannot be read: then nothing is pinned."""
    try:
        balancer.sample()
        time.sleep(seconds)
        balancer.sample()
    except (OSError, ValueError, IndexError) as exc:
        log.warning("not pinning to CPUs: cannot read how busy they are: %s", exc)
        return False
    return True


def jittered(interval: float) -> float:
    """The wait before the next look, a quarter either way, so checkpoints of one host look apart."""
    return interval * random.uniform(0.75, 1.25)


def log_moves(moves: Mapping[int, tuple[int, int, float]], names: Mapping[int, str]) -> None:
    for pid, (was, now, share) in moves.items():
        log.info("%s moved from CPU %d to CPU %d: other work kept CPU %d %.0f%% busy",
                 names.get(pid, f"pid {pid}"), was, now, was, share * 100)


def pin_this_process(interval: float, mode: str = "on", balancer: Balancer | None = None) -> int | None:
    """`serve` with one process: pin it to the freest CPU, and keep looking from a thread of its
    own about every `interval` seconds (0: never move). Returns the CPU; None where the system
    refuses (the process then runs unpinned, as with --pin-cpus off). `balancer`: one reading
    another stat file than /proc/stat (a test's, which decides how busy each CPU looks)."""
    balancer = balancer or Balancer()
    if not start(balancer):
        return None
    cpu = balancer.choose()
    before = os.sched_getaffinity(0)
    try:
        pin(os.getpid(), cpu, batch=True)
    except OSError as exc:  # a sandbox that refuses affinity: slower, not wrong
        log.warning("checkpoint not pinned to a CPU: %s", exc)
        for task in os.listdir("/proc/self/task"):  # whatever was pinned before the refusal goes back
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task), before)
        return None
    log.info("checkpoint pinned to CPU %d (--pin-cpus %s)", cpu, mode)
    balancer.place(os.getpid(), cpu)
    if interval > 0:
        def keep() -> None:
            while True:
                time.sleep(jittered(interval))
                try:
                    log_moves(balancer.look(), {os.getpid(): "the checkpoint"})
                except (OSError, ValueError, IndexError) as exc:  # /proc unreadable: stay where it is
                    log.warning("CPU placement stops looking: %s", exc)
                    return

        threading.Thread(target=keep, name="cpu-placement", daemon=True).start()
    return cpu
