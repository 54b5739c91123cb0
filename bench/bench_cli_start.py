"""Command-line start time: whole processes, wall and CPU, median of N runs each.

    .venv/bin/python -m bench.bench_cli_start [--runs N]

Rows: `warden --help`, `warden check --help`, `warden check` of README's example request against
the shipped policies, and two floors to read them against: the interpreter alone, and the
interpreter importing only the libraries a policy load cannot do without (pydantic, PyYAML,
protobuf's JSON, fastjsonschema, Google's CEL; jsonschema only words a refusal). Goals on the
2-core machine this was built on: `warden --help` under 150 ms and `warden check` under 300 ms.
Each command runs once
unmeasured first, so bytecode is compiled; CPU is the children's user + system time.

The same by hand, with public tools: `/usr/bin/time -f '%e s %U+%S cpu' warden check ...`, and
where the time goes: `python -X importtime -m warden.cli check ... 2>&1 | sort -t'|' -k2 -n`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOALS_MS = {"warden --help": 150.0, "warden check": 300.0}
# one trivial model class too: pydantic loads its schema machinery at the first class, not at import
LIBRARIES = ("from pydantic import BaseModel; import yaml, fastjsonschema, cel_expr_python.cel; "
             "from google.protobuf import json_format\nclass M(BaseModel):\n    x: int = 0")


def _warden() -> list[str]:
    script = Path(sys.executable).with_name("warden")  # the installed entry point, as an operator runs it
    return [str(script)] if script.exists() else [sys.executable, "-m", "warden.cli"]


def _request(folder: Path) -> Path:
    """README's example: recon asks to scan an off-limits host (DENY subject_off_limits)."""
    from checkpoint.policy import load_policy_dir

    version = load_policy_dir(ROOT / "policies").agents["recon"].version
    path = folder / "req.json"
    path.write_text(json.dumps({
        "run": {"runId": "run-1", "mode": "RUN_MODE_INTERACTIVE",
                "actorChain": [{"kind": "ACTOR_KIND_PERSON", "id": "alice"},
                               {"kind": "ACTOR_KIND_AGENT", "id": "recon", "agentVersion": version}]},
        "toolCall": {"tool": "create_task_from_template",
                     "arguments": {"template": "web-basic", "target": "payments.lab.example.com"}}}))
    return path


def _time(argv: list[str], runs: int, env: dict[str, str]) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each run, after one run that is not counted."""
    walls, cpus = [], []
    for i in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
        if i:
            walls.append(wall)
            cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return walls, cpus


def _row(name: str, walls: list[float], cpus: list[float]) -> str:
    ms = sorted(w * 1000 for w in walls)
    p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
    goal = GOALS_MS.get(name)
    verdict = "" if goal is None else f"   goal < {goal:.0f} ms: {'met' if statistics.median(ms) < goal else 'NOT met'}"
    return (f"{name:<36} wall median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms   "
            f"cpu median {statistics.median(cpus) * 1000:6.1f} ms   (n={len(ms)}){verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11, help="measured runs of each command (default 11)")
    # `python -m bench` calls main() with no arguments; its own argv is not ours.
    args = parser.parse_args(argv or [])
    env = {k: v for k, v in os.environ.items() if k != "WARDEN_CONFIG"}
    env["PYDANTIC_DISABLE_PLUGINS"] = "__all__"  # what `warden` sets for itself; the floor row alike
    warden = _warden()
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} CPUs; {' '.join(warden)}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        request = _request(Path(tmp))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python: the libraries a load needs": [sys.executable, "-c", LIBRARIES],
            "warden --help": [*warden, "--help"],
            "warden check --help": [*warden, "check", "--help"],
            "warden check": [*warden, "check", "--policies", str(ROOT / "policies"), str(request)],
        }
        for name, command in commands.items():
            print(_row(name, *_time(command, args.runs, env)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
