"""Policy load time for the shipped policies, and what the typed CEL check adds to it.

A load parses, validates and compiles every file; the typed check (checkpoint/cel/typed.py)
compiles each condition and `touches` expression once more against the declared fields. Its
checkers (a descriptor pool and an Env per distinct `args` type) are kept across loads, so a
reload of an unchanged set pays only the extra compiles; "cold" builds them again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _median_ms(fn: Callable[[], object], rounds: int = 15) -> float:
    fn()  # warm up: imports, engines, caches
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:  # no options; argv for the runner's sake
    from checkpoint.cel import typed
    from checkpoint.policy import load_policy_dir

    policies = ROOT / "policies"
    loaded = load_policy_dir(policies)
    expressions = len(loaded.rules) + sum(len(t.touches) for t in loaded.tools.values())
    print(f"policy load, shipped policies ({len(loaded.rules)} rules, {expressions} CEL expressions)")
    print(f"{'':<52} {'median':>9}")
    for engine in ("native", "python"):
        def load(engine: str = engine) -> object:
            return load_policy_dir(policies, cel_engine=engine)

        def cold(engine: str = engine) -> object:
            typed._checkers.clear()
            return load_policy_dir(policies, cel_engine=engine)

        typed_ms = _median_ms(load)
        cold_ms = _median_ms(cold)
        typed.AVAILABLE = False  # what the load costs without the typed check
        try:
            untyped_ms = _median_ms(load)
        finally:
            typed.AVAILABLE = True
        print(f"{f'engine {engine}, typed check':<52} {typed_ms:>7.1f}ms")
        print(f"{f'engine {engine}, typed check, checkers built anew':<52} {cold_ms:>7.1f}ms")
        print(f"{f'engine {engine}, no typed check':<52} {untyped_ms:>7.1f}ms")
    # the typed checks alone, as a load makes them (the difference above is within the noise)
    from checkpoint.policy import celtypes

    checks = [(celtypes.rule_shapes([(n, loaded.tools[n].spec.input_schema) for n in r.spec.tools]),
               r.spec.condition) for r in loaded.rules]
    checks += [(celtypes.touches_shapes(t.name, t.spec.input_schema), p.source)
               for t in loaded.tools.values() for p in t.touches.values()]

    def check_all() -> None:
        for shapes, source in checks:
            typed.checker_for(shapes).check(source)

    def build_all() -> None:
        typed._checkers.clear()
        check_all()

    print(f"{f'the {len(checks)} typed checks alone':<52} {_median_ms(check_all):>7.2f}ms")
    print(f"{'... with their checkers built anew':<52} {_median_ms(build_all):>7.2f}ms")


if __name__ == "__main__":
    main()
