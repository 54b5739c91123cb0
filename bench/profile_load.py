"""Where a loaded checkpoint worker spends its GIL: py-spy samples under h2load at c=32.

Not run by `make bench` (the file is not bench_*). Starts `warden checkpoint serve --workers auto`
(plus any serve flags given after `--`), loads it with h2load (8 connections x 4 streams, or one
connection with `--concurrency 1`) and
records one worker with `py-spy record --gil` (only samples of the thread holding the GIL), then
prints the shares by function (inclusive and self) and by file. py-spy comes with the dev extra.

    .venv/bin/python bench/profile_load.py --seconds 10 [--concurrency 1] [--workers 1] [-- --pin-cpus off]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import bench_cerbos  # noqa: E402


def summarise(raw: Path, top: int) -> None:
    """py-spy's raw format: one stack a line, frames joined by ';', then the sample count."""
    total = 0
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, count = line.rsplit(" ", 1)
        n = int(count)
        total += n
        frames = [re.sub(r"\(/\S*/(site-packages|python3\.\d+|checkpoint|warden|bench)/", r"(\1/", f)
                  for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += n
        own[frames[-1]] += n
        found = re.search(r"\(([^:]+):\d+\)", frames[-1])
        files[found.group(1) if found else "?"] += n
    print(f"{total} samples holding the GIL")
    for title, counter in (("inclusive", inclusive), ("self", own), ("self, by file", files)):
        print(f"-- {title}")
        for name, n in counter.most_common(top):
            print(f"{100 * n / max(total, 1):5.1f}%  {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=10, help="how long to sample (default 10)")
    parser.add_argument("--top", type=int, default=30, help="lines per table (default 30)")
    parser.add_argument("--out", type=Path, help="keep py-spy's raw output here")
    parser.add_argument("--concurrency", type=int, choices=(1, 32), default=32,
                        help="1: one connection, one call at a time; 32 (default): 8 connections x 4 streams")
    parser.add_argument("--workers", default="auto", help="the checkpoint's --workers (default auto)")
    parser.add_argument("serve_flags", nargs="*", help="after --: more `checkpoint serve` flags")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists() or shutil.which("h2load") is None:
        print("needs py-spy (the dev extra) and h2load (Debian: nghttp2-client)")
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="warden-profile-"))
    server, _, _ = bench_cerbos.start_warden(tmp, args.workers, {**os.environ, "PYTHONPATH": str(ROOT)},
                                             tuple(args.serve_flags))
    raw = args.out or tmp / "py-spy.txt"
    try:
        bench_cerbos.h2load(server, tmp, args.concurrency, 2)  # warm
        worker = server.worker_pids()[0]
        recorder = subprocess.Popen([spy, "record", "--pid", str(worker), "--gil", "--duration", str(args.seconds),
                                     "--rate", "250", "--format", "raw", "-o", str(raw), "--nonblocking"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        result = bench_cerbos.h2load(server, tmp, args.concurrency, args.seconds)
        recorder.wait(timeout=60)
        print(f"{server.name}: {result['rps']:.0f} calls/s at c={args.concurrency}, server CPU {result['cpu_us']:.0f} us/call; "
              f"load average {os.getloadavg()[0]:.2f}")
        summarise(raw, args.top)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
