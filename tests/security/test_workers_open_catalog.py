"""Workers opening a new data folder together (`serve --workers N` on its first start) each make
the catalog's schema: one at a time, or a worker dies at start.

Seen in a real two-worker start: worker 0 failed with `duplicate column name: proposed_for` (the
skills and templates tables were made outside the catalog's file lock) and was restarted. With
`--workers auto` on a machine with many CPUs, three such deaths in a row stop the whole checkpoint
(workers.py, QUICK_EXITS_ALLOWED)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

PROCESSES, ROUNDS = 6, 8


def _open(path: str, start_at: float, errors: multiprocessing.Queue) -> None:
    from checkpoint.policy import AgentCatalog

    while time.time() < start_at:  # all open a file that does not exist yet, together
        time.sleep(0.0005)
    try:
        AgentCatalog(path)
    except Exception as exc:  # noqa: BLE001 - reported to the test
        errors.put(f"{type(exc).__name__}: {exc}")


def test_workers_opening_a_new_catalog_together_all_start(tmp_path: Path):
    ctx = multiprocessing.get_context("fork")  # forked, as the supervisor forks its workers
    errors: multiprocessing.Queue = ctx.Queue()
    for n in range(ROUNDS):
        path = tmp_path / f"catalog-{n}.db"
        start_at = time.time() + 0.5
        procs = [ctx.Process(target=_open, args=(str(path), start_at, errors)) for _ in range(PROCESSES)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
        assert all(p.exitcode == 0 for p in procs)
    found = []
    while not errors.empty():
        found.append(errors.get())
    assert not found, found
