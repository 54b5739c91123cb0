"""How many workers `--workers auto` starts and where pinned workers go: the cgroup CPU quota read
from files laid out as the kernel lays them out, the busy shares read from /proc-shaped files, and
the placement plan each look makes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.server import cpu_placement
from checkpoint.server.cpu_placement import Balancer, cpu_busy, cpu_limit, plan, process_ticks, should_pin
from checkpoint.server.workers import worker_count

from .conftest import REPO


def _v2(tmp: Path, own: str, mount_root: str, quotas: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 tree mounted at tmp/cg showing `mount_root` of it, cpu.max at the given paths
    (relative to the mount), and the /proc/self/cgroup and mountinfo files that describe it."""
    top = tmp / "cg"
    top.mkdir(parents=True, exist_ok=True)
    for path, text in quotas.items():
        node = top / path.strip("/")
        node.mkdir(parents=True, exist_ok=True)
        (node / "cpu.max").write_text(text + "\n")
    (tmp / "cgroup").write_text(f"0::{own}\n")
    (tmp / "mountinfo").write_text(
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        f"35 22 0:30 {mount_root} {top} rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n")
    return tmp / "mountinfo", tmp / "cgroup"


def _v1(tmp: Path, quota: str, period: str = "100000") -> tuple[Path, Path]:
    """Docker on a cgroup v1 host: the container's own cgroup (/docker/ID) mounted as the top of
    /sys/fs/cgroup/cpu, as `docker run` leaves it."""
    top = tmp / "cpu"
    top.mkdir(parents=True)
    (top / "cpu.cfs_quota_us").write_text(quota + "\n")
    (top / "cpu.cfs_period_us").write_text(period + "\n")
    (tmp / "cgroup").write_text("9:name=systemd:/docker/abc\n4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n"
                               "0::/docker/abc\n")
    (tmp / "mountinfo").write_text(
        f"79 78 0:46 / {tmp} rw,nosuid - tmpfs tmpfs rw,mode=755\n"
        f"81 79 0:30 /docker/abc {tmp / 'memory'} ro,nosuid - cgroup cgroup rw,memory\n"
        f"80 79 0:29 /docker/abc {top} ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct\n")
    return tmp / "mountinfo", tmp / "cgroup"


def test_a_v2_quota_rounds_up_to_whole_cpus(tmp_path):
    # a container with its own cgroup namespace: it sees its cgroup as / and mounted as the top
    assert cpu_limit(*_v2(tmp_path / "a", "/", "/", {"/": "150000 100000"})) == 2
    assert cpu_limit(*_v2(tmp_path / "b", "/", "/", {"/": "100000 100000"})) == 1
    assert cpu_limit(*_v2(tmp_path / "c", "/", "/", {"/": "5000 100000"})) == 1  # a twentieth is still one


def test_the_smallest_v2_quota_on_the_way_up_binds(tmp_path):
    # the pod's limit above the container's own "max": the pod's wins, and the node's is larger
    files = _v2(tmp_path, "/kubepods/pod1/ckpt", "/", {"/kubepods/pod1/ckpt": "max 100000",
                                                          "/kubepods/pod1": "300000 100000",
                                                          "/kubepods": "800000 100000"})
    assert cpu_limit(*files) == 3


def test_a_v2_mount_of_part_of_the_tree_is_read_relative_to_its_root(tmp_path):
    # mounted from /kubepods: the process's /kubepods/pod1 is the mount's /pod1
    files = _v2(tmp_path, "/kubepods/pod1", "/kubepods", {"/pod1": "200000 100000", "/": "max 100000"})
    assert cpu_limit(*files) == 2
    # a mount showing another part of the tree says nothing of this process
    other = _v2(tmp_path / "other", "/system.slice/x", "/kubepods", {"/": "100000 100000"})
    assert cpu_limit(*other) is None


def test_no_v2_quota_anywhere_is_no_limit(tmp_path):
    assert cpu_limit(*_v2(tmp_path / "a", "/a/b", "/", {"/a/b": "max 100000", "/a": "max 100000"})) is None
    assert cpu_limit(*_v2(tmp_path / "b", "/", "/", {})) is None


def test_a_v1_quota_is_read_where_docker_mounts_the_containers_cgroup(tmp_path):
    assert cpu_limit(*_v1(tmp_path / "a", "150000")) == 2
    assert cpu_limit(*_v1(tmp_path / "b", "50000", "100000")) == 1
    assert cpu_limit(*_v1(tmp_path / "c", "-1")) is None  # no quota


@pytest.mark.parametrize("quota", ["", "lots", "0.5"])
def test_a_malformed_quota_file_is_no_limit(tmp_path, quota):
    assert cpu_limit(*_v1(tmp_path, quota)) is None


@pytest.mark.parametrize("period", ["0", "", "-"])
def test_a_zero_or_malformed_period_is_no_limit(tmp_path, period):
    assert cpu_limit(*_v1(tmp_path, "100000", period)) is None


def test_unreadable_or_foreign_proc_files_are_no_limit(tmp_path):
    mountinfo, cgroup = _v2(tmp_path, "/", "/", {"/": "100000 100000"})
    assert cpu_limit(tmp_path / "missing", cgroup) is None
    assert cpu_limit(mountinfo, tmp_path / "missing") is None
    cgroup.write_text("garbage\n")  # no controller line: nothing to place the process in the tree
    assert cpu_limit(mountinfo, cgroup) is None
    mountinfo.write_text("half a line\n35 22 0:30 / / rw - cgroup2\n")
    cgroup.write_text("0::/\n")
    assert cpu_limit(mountinfo, cgroup) is None


def test_auto_workers_are_bounded_by_the_quota(monkeypatch):
    monkeypatch.setattr(cpu_placement, "cpu_limit", lambda: 1)
    assert worker_count("auto") == 1
    monkeypatch.setattr(cpu_placement, "cpu_limit", lambda: None)
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    assert worker_count("3") == 3  # a number is taken as given


def test_auto_pins_when_every_worker_can_have_a_cpu_of_its_own():
    cpus = len(os.sched_getaffinity(0))
    assert should_pin("auto", cpus) and should_pin("auto", 1)
    assert not should_pin("auto", cpus + 1)
    assert should_pin("on", cpus + 1) and not should_pin("off", 1)


# ---- the plan of one look ---------------------------------------------------------------


def test_a_worker_moves_off_a_crowded_cpu_only_after_patience():
    strikes: dict[int, int] = {}
    crowded = {0: 0.9, 1: 0.1}
    assert plan(crowded, {100: 0}, strikes) == {}  # one look is not enough: a burst passes
    assert strikes == {100: 1}
    assert plan(crowded, {100: 0}, strikes) == {100: 1}
    assert strikes == {100: 0}


def test_a_look_without_a_reason_resets_the_count():
    strikes: dict[int, int] = {}
    assert plan({0: 0.9, 1: 0.1}, {100: 0}, strikes) == {}
    assert plan({0: 0.2, 1: 0.1}, {100: 0}, strikes) == {}  # calm again
    assert plan({0: 0.9, 1: 0.1}, {100: 0}, strikes) == {}  # so this is the first strike again
    assert strikes == {100: 1}


@pytest.mark.parametrize(("here", "there"), [(0.40, 0.10), (0.50, 0.20), (0.30, 0.0)])
def test_a_difference_within_the_margin_is_noise(here, there):
    strikes: dict[int, int] = {}
    for _ in range(5):
        assert plan({0: here, 1: there}, {100: 0}, strikes) == {}


def test_two_workers_on_one_cpu_spread_and_two_crowded_ones_do_not_take_the_same_free_cpu():
    strikes: dict[int, int] = {}
    # our own two on CPU 0: each counts the other as a whole CPU of load
    plan({0: 0.0, 1: 0.0, 2: 0.0}, {1: 0, 2: 0}, strikes)
    moves = plan({0: 0.0, 1: 0.0, 2: 0.0}, {1: 0, 2: 0}, strikes)
    assert len(moves) == 1 and set(moves.values()) <= {1, 2}
    # two workers crowded by other work, one free CPU: only one goes there; the other sees it taken
    strikes = {}
    foreign = {0: 0.9, 1: 0.9, 2: 0.0}
    plan(foreign, {1: 0, 2: 1}, strikes)
    assert list(plan(foreign, {1: 0, 2: 1}, strikes).values()) == [2]


def test_more_workers_than_cpus_stay_evenly_spread():
    strikes: dict[int, int] = {}
    placed = {1: 0, 2: 1, 3: 0}  # two on CPU 0, one on CPU 1: no move makes it better
    for _ in range(4):
        assert plan({0: 0.0, 1: 0.0}, placed, strikes) == {}


def test_no_cpu_to_read_is_no_move():
    assert plan({}, {1: 0}, {}) == {}


# ---- the busy shares ----------------------------------------------------------------------


def _stat(path: Path, cpus: dict[int, tuple[int, int, int]]) -> None:
    """/proc/stat with, per CPU, (user, idle, steal) ticks."""
    lines = ["cpu  1 2 3 4 5 6 7 8 0 0"]
    lines += [f"cpu{n} {u} 0 0 {i} 0 0 0 {st} 0 0" for n, (u, i, st) in cpus.items()]
    path.write_text("\n".join(lines + ["intr 1 2 3", "ctxt 5"]) + "\n")


def _pid_stat(proc: Path, pid: int, utime: int, stime: int, name: str = "python3 (x) y") -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    tail = ["S"] + ["0"] * 10 + [str(utime), str(stime)] + ["0"] * 30
    (proc / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(tail)}\n")


def test_proc_files_are_read_as_proc_5_lays_them_out(tmp_path):
    _stat(tmp_path / "stat", {0: (100, 300, 50), 1: (10, 390, 0)})
    assert cpu_busy(tmp_path / "stat") == {0: (150, 450), 1: (10, 400)}  # steal is busy
    _pid_stat(tmp_path, 42, 7, 5)  # a name with spaces and parentheses
    assert process_ticks(42, tmp_path) == 12
    assert process_ticks(43, tmp_path) == 0  # gone


def test_our_own_ticks_are_not_counted_as_other_work(tmp_path):
    stat, proc = tmp_path / "stat", tmp_path / "proc"
    balancer = Balancer(allowed=lambda: [0, 1], stat=stat, proc=proc)
    _stat(stat, {0: (0, 0, 0), 1: (0, 0, 0)})
    assert balancer.sample() is None  # the first sample only starts the count
    # a worker placed after that sample, having already spent 100 ticks (it started, loaded policies)
    _pid_stat(proc, 42, 90, 10)
    balancer.place(42, 0)
    # 100 ticks each: CPU 0 was 80 busy, 60 of them ours since it was placed; CPU 1 30 with other work
    _stat(stat, {0: (80, 20, 0), 1: (30, 70, 0)})
    _pid_stat(proc, 42, 140, 20)
    assert balancer.sample() == pytest.approx({0: 0.2, 1: 0.3})
    assert balancer.foreign == pytest.approx({0: 0.2, 1: 0.3})


def test_only_allowed_cpus_that_proc_stat_shows_are_looked_at(tmp_path):
    stat = tmp_path / "stat"
    allowed = [0, 1, 5]
    balancer = Balancer(allowed=lambda: allowed, stat=stat, proc=tmp_path)
    _stat(stat, {0: (0, 0, 0), 1: (0, 0, 0), 2: (0, 0, 0)})
    balancer.sample()
    _stat(stat, {0: (50, 50, 0), 1: (10, 90, 0), 2: (0, 100, 0)})
    assert set(balancer.sample() or {}) == {0, 1}  # 2 is not allowed, 5 is offline
    allowed = [0]  # the CPU set shrank
    _stat(stat, {0: (60, 140, 0), 1: (20, 180, 0), 2: (0, 200, 0)})
    assert set(balancer.sample() or {}) == {0}


def test_a_new_process_goes_to_the_freest_cpu_of_the_last_look():
    balancer = Balancer(allowed=lambda: [0, 1, 2, 3])
    balancer.foreign = {0: 0.9, 1: 0.2, 2: 0.6}  # CPU 3 did not show in the look: never chosen
    assert balancer.choose() == 1
    balancer.placed[7] = 1
    assert balancer.choose() == 2  # 1 holds one of ours: 1.2 against 0.6
    spread = Balancer(allowed=lambda: [0, 1, 2])
    spread.foreign = {0: 0.0, 1: 0.0, 2: 0.5}
    assert {spread.choose() for _ in range(200)} == {0, 1}  # equally free: at random, so checkpoints spread


def test_a_worker_on_a_cpu_it_may_no_longer_use_moves_at_once():
    strikes: dict[int, int] = {}
    assert plan({0: 0.9, 1: 0.9}, {42: 3}, strikes) in ({42: 0}, {42: 1})


def test_the_target_is_picked_among_the_near_equal_only():
    seen: list[list[int]] = []

    def pick(cpus: list[int]) -> int:
        seen.append(cpus)
        return cpus[-1]

    strikes = {42: 1}
    assert plan({0: 1.0, 1: 0.0, 2: 0.03, 3: 0.5}, {42: 0}, strikes, pick=pick) == {42: 2}
    assert seen == [[1, 2]]


def test_a_move_the_system_refuses_is_not_recorded(tmp_path, caplog):
    # a real refusal: the kernel answers EINVAL for a CPU this machine does not have
    stat = tmp_path / "stat"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        here = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(sleeper.pid, {here})
        balancer = Balancer(allowed=lambda: [here, 1000], stat=stat)
        _stat(stat, {here: (0, 0, 0), 1000: (0, 0, 0)})
        balancer.sample()
        balancer.place(sleeper.pid, here)
        for step in (1, 2):  # other work keeps `here` busy; CPU 1000 looks free
            _stat(stat, {here: (95 * step, 5 * step, 0), 1000: (0, 100 * step, 0)})
            assert balancer.look() == {}
        assert balancer.placed == {sleeper.pid: here}
        assert os.sched_getaffinity(sleeper.pid) == {here}
        assert "moving it to CPU 1000 was refused" in caplog.text
    finally:
        sleeper.kill()
        sleeper.wait()


def test_unreadable_proc_stat_means_no_pinning(tmp_path):
    from checkpoint.server.cpu_placement import start

    assert start(Balancer(stat=tmp_path / "no-stat"), seconds=0) is False
    (tmp_path / "half").write_text("cpu0 12 0 3\ncpu1 x\n")  # a half-written, garbled file
    assert start(Balancer(stat=tmp_path / "half"), seconds=0) is False


def _serve(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", "checkpoint", "serve", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("text", ["maybe", "2", "pinned", ""])
def test_pin_cpus_refuses_other_words_from_flag_and_environment(tmp_path, text):
    flag = _serve("--data", str(tmp_path), "--pin-cpus", text)
    assert flag.returncode == 2 and "--pin-cpus" in flag.stderr and "expected auto, on or off" in flag.stderr, flag.stderr
    env = _serve("--data", str(tmp_path), env={"WARDEN_PIN_CPUS": text})
    assert env.returncode == 2 and "WARDEN_PIN_CPUS" in env.stderr, env.stderr
    assert not any(tmp_path.iterdir()), "a refused setting must change nothing"


@pytest.mark.parametrize("text", ["-1", "-0.001", "nan", "inf", "soon", ""])
def test_rebalance_interval_refuses_what_is_not_zero_or_more_seconds(tmp_path, text):
    done = _serve("--data", str(tmp_path), "--rebalance-interval", text)
    assert done.returncode == 2 and "--rebalance-interval" in done.stderr, done.stderr
    env = _serve("--data", str(tmp_path), env={"WARDEN_REBALANCE_INTERVAL": text})
    assert env.returncode == 2 and "WARDEN_REBALANCE_INTERVAL" in env.stderr, env.stderr
    assert not any(tmp_path.iterdir())


def test_rebalance_interval_zero_means_place_once():
    from checkpoint.server_cli import _seconds_or_never

    assert _seconds_or_never("0") == 0.0 and _seconds_or_never("0.5") == 0.5


@pytest.mark.parametrize(("text", "mode"), [("true", "on"), ("YES", "on"), ("1", "on"), ("false", "off"),
                                            ("No", "off"), ("0", "off"), ("Auto", "auto"), (" off ", "off")])
def test_pin_cpus_keeps_the_meaning_of_the_old_switch_words(text, mode):
    # --pin-cpus was a switch: WARDEN_PIN_CPUS=true written for it still means on
    from checkpoint.server_cli import _pin_mode

    assert _pin_mode(text) == mode
