"""CPU placement against real other work: where a pinned process lands beside a busy loop, and how
long it takes to move when the busy loop comes to its CPU.

    .venv/bin/python -m bench.bench_placement [--interval SECONDS] [--wait SECONDS]

This reads the machine's own /proc/stat, so its answer depends on everything else running: on
a machine other work keeps busy, every CPU looks crowded and staying put is the right answer
(a move needs one CPU `MARGIN` freer than the worker's). That is why it is a benchmark, run on
a quiet machine, and not a test: tests/server/test_workers.py decides how busy each CPU looks
through a stat file of its own and checks the same placement and moves on any machine.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINNED = """
import sys, time
from checkpoint.server.cpu_placement import pin_this_process
print(pin_this_process(float(sys.argv[1])), flush=True)
time.sleep(600)
"""


def _on(pid: int) -> set[int]:
    return {c for t in os.listdir(f"/proc/{pid}/task") for c in os.sched_getaffinity(int(t))}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_placement")
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between looks (default 0.5)")
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the move (default 30)")
    args = parser.parse_args(argv)
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("placement: needs two CPUs")
        return
    first, second = cpus[:2]
    with open("/proc/loadavg") as f:
        print(f"placement: load average {f.read().split()[0]} on {os.cpu_count()} CPUs")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, {first}))
    pinned = None
    try:
        time.sleep(1.0)  # /proc/stat shows the busy loop's CPU busy
        pinned = subprocess.Popen([sys.executable, "-c", PINNED, str(args.interval)], cwd=ROOT, stdout=subprocess.PIPE,
                                  text=True, preexec_fn=lambda: os.sched_setaffinity(0, {first, second}))
        assert pinned.stdout is not None
        placed = pinned.stdout.readline().strip()
        print(f"placement: busy loop on CPU {first}, pinned process placed on CPU {placed} "
              f"({'beside it' if placed == str(second) else 'ON THE BUSY CPU'})")
        target = first if placed == str(second) else second
        os.sched_setaffinity(hog.pid, {int(placed)})
        started = time.monotonic()
        while _on(pinned.pid) != {target} and time.monotonic() - started < args.wait:
            time.sleep(0.05)
        if _on(pinned.pid) == {target}:
            print(f"placement: moved to CPU {target} {time.monotonic() - started:.2f} s after the busy loop came")
        else:
            print(f"placement: did not move within {args.wait:g} s (other work keeps every CPU busy?)")
    finally:
        hog.kill()
        hog.wait()
        if pinned is not None:
            pinned.kill()
            pinned.wait()


if __name__ == "__main__":
    main(sys.argv[1:])
