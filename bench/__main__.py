"""Run every benchmark (`make bench`), or those named: `python -m bench decide grpc`."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import time
from pathlib import Path

ORDER = ["decide", "cli_start", "replay", "cel", "audit", "log_writers", "grpc", "cerbos", "toolrunner"]


def main(argv: list[str]) -> int:
    found = sorted(
        m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(Path(__file__).parent)])
        if m.name.startswith("bench_")
    )
    if any(a.startswith("-") for a in argv):  # `--help`, or a bench's own option given here by mistake
        print(f"usage: python -m bench [NAME ...]: each with its defaults (all, in order, with none);\n"
              f"a bench's own options: python bench/bench_NAME.py --help\nNAME: {' '.join(found)}")
        return 0 if {"-h", "--help"} & set(argv) else 2
    unknown = [n for n in argv if n not in found]
    if unknown:
        print(f"python -m bench: no bench named {', '.join(unknown)}; the benches: {' '.join(found)}", file=sys.stderr)
        return 2
    names = argv or sorted(found, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))
    failed = []
    for name in names:
        print(f"\n=== bench {name} ===", flush=True)
        started = time.perf_counter()
        try:
            # each with its defaults: the names given here are not the bench's own arguments
            importlib.import_module(f"bench.bench_{name}").main([])
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not hide the others
            print(f"bench {name} failed: {type(exc).__name__}: {exc}", flush=True)
            failed.append(name)
        print(f"--- {name}: {time.perf_counter() - started:.1f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
