"""How many workers `--workers auto` starts and where `--pin-cpus auto` pins: the cgroup v2 CPU
quota read from real files laid out as /sys/fs/cgroup is, and the CPU set of this very thread."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from checkpoint.server import workers
from checkpoint.server.workers import cpu_limit, cpus_reserved, should_pin, worker_count

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
    monkeypatch.setattr(workers, "cpu_limit", lambda: 1)
    assert worker_count("auto") == 1
    monkeypatch.setattr(workers, "cpu_limit", lambda: None)
    assert worker_count("auto") == len(os.sched_getaffinity(0))
    assert worker_count("3") == 3  # a number is taken as given


@contextmanager
def _affinity(cpus: set[int]) -> Iterator[None]:
    """This thread only (sched_setaffinity(0) moves the calling thread), put back afterwards."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def test_auto_pins_only_where_some_of_the_cpus_are_reserved():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or len(cpus) < (os.cpu_count() or 0):
        pytest.skip("needs a thread that may run on every one of at least two online CPUs")
    assert not cpus_reserved()
    assert not should_pin("auto") and should_pin("on") and not should_pin("off")
    with _affinity({cpus[-1]}):
        assert cpus_reserved()
        assert should_pin("auto") and should_pin("on") and not should_pin("off")


def _serve(*flags: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "warden.cli", "checkpoint", "serve", *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize("text", ["yes", "true", "ON", "1"])
def test_pin_cpus_takes_auto_on_off_only_from_flag_and_environment(tmp_path, text):
    flag = _serve("--data", str(tmp_path), "--pin-cpus", text)
    assert flag.returncode == 2 and "--pin-cpus" in flag.stderr and "'auto', 'on', 'off'" in flag.stderr, flag.stderr
    env = _serve("--data", str(tmp_path), env={"WARDEN_PIN_CPUS": text})
    assert env.returncode == 2 and "WARDEN_PIN_CPUS" in env.stderr, env.stderr
    assert not any(tmp_path.iterdir()), "a refused setting must change nothing"
