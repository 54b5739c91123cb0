"""Median microseconds per CEL evaluation, native vs python engine, side by side.

    .venv/bin/python bench/bench_cel.py [--rounds N]

Each round times a batch of evaluations of one compiled program (compile happens once, as
at policy load); the median over rounds is reported, which shrugs off GC pauses and noisy
neighbours better than a mean.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

# Runnable as a plain script from a checkout, without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoint.cel import CelType, get_engine  # noqa: E402

EXPRESSION = (
    "args.amount > 100.0 && tool.name in ['issue_refund'] && !(run.mode == 'background')"
)
VARIABLES = {
    "args": CelType.MAP_STRING_DYN,
    "tool": CelType.MAP_STRING_DYN,
    "agent": CelType.MAP_STRING_DYN,
    "run": CelType.MAP_STRING_DYN,
    "counters": CelType.MAP_STRING_DYN,
    "action": CelType.STRING,
    "subjects": CelType.LIST_STRING,
}
ACTIVATION = {
    "args": {"amount": 150.0, "customer": "cus_42", "reason": "damaged", "items": [{"sku": "a", "qty": 1}]},
    "tool": {"name": "issue_refund", "access": "write"},
    "agent": {"name": "support", "version": "v3", "access": ["read", "write"]},
    "run": {"tenant": "acme", "mode": "interactive", "run_id": "r-1", "depth": 0},
    "counters": {"tool_calls": 4, "spend_usd": 1.25},
    "action": "tool_call",
    "subjects": ["customer:cus_42"],
}


def measure(engine_name: str, rounds: int, batch: int) -> float:
    program = get_engine(engine_name).compile(EXPRESSION, VARIABLES)
    assert program.evaluate(ACTIVATION).is_true(), "benchmark expression must be true"
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(batch):
            program.evaluate(ACTIVATION)
        samples.append((time.perf_counter() - start) / batch * 1e6)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    print(f"expression: {EXPRESSION}")
    results = {
        "native": measure("native", args.rounds, batch=2000),
        "python": measure("python", args.rounds, batch=50),
    }
    for name, us in results.items():
        print(f"{name:>7}: median {us:8.1f} us per evaluation")
    print(f"  ratio: python/native = {results['python'] / results['native']:.0f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
