"""The catalog on SQLite: how long an older catalog file takes to upgrade to the one table shape at
open, and what the reads a policy load and an admin make cost on it.

    python -m bench.bench_catalog [--agents 200] [--versions 10] [--learnings 2000]

The file is written as the release before the one table shape wrote it (its tables, by SQL), so
the same command run with an older release's code on PYTHONPATH measures that release's reads of it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from checkpoint.policy.catalog import AgentCatalog
from checkpoint.policy.learnings import _COLUMNS as LEARNING_COLUMNS
from checkpoint.policy.learnings import LearningStore

_LIFECYCLE = ("agent", "version", "status", "source", "proposed_by", "proposed_at", "note", "decided_by",
              "decided_at", "decision_note", "proposed_for")


def _old_files(folder: Path, agents: int, versions: int, learnings: int) -> None:
    with sqlite3.connect(folder / "catalog.db") as conn:
        conn.execute("CREATE TABLE agent_versions (agent TEXT, version TEXT, snapshot TEXT, first_seen TEXT, "
                     "policy_revision TEXT, PRIMARY KEY (agent, version))")
        conn.execute("CREATE TABLE policy_revisions (revision TEXT PRIMARY KEY, files TEXT, first_seen TEXT)")
        conn.execute(f"CREATE TABLE agent_lifecycle ({', '.join(c + ' TEXT' for c in _LIFECYCLE)}, "
                     "PRIMARY KEY (agent, version))")
        conn.execute("CREATE TABLE agent_live (agent TEXT PRIMARY KEY, version TEXT, file_version TEXT)")
        for a in range(agents):
            for v in range(versions):
                snap = {"name": f"a{a}", "tenant": "default", "persona": f"p{v}", "description": "",
                        "wildcard": False, "tools": ["read_doc"], "delegates": [], "scope": {}, "budget": {}}
                conn.execute("INSERT INTO agent_versions VALUES (?, ?, ?, ?, ?)",
                             (f"a{a}", f"v{v}", json.dumps(snap), f"2026-01-01T00:00:{v:02d}Z", "rev"))
                status = "live" if v == versions - 1 else "retired" if v == 0 else "superseded"
                conn.execute(f"INSERT INTO agent_lifecycle VALUES ({', '.join('?' * len(_LIFECYCLE))})",
                             (f"a{a}", f"v{v}", status, "files", "policy-files", "t", "", "carol", "t", "", ""))
            conn.execute("INSERT INTO agent_live VALUES (?, ?, ?)", (f"a{a}", f"v{versions - 1}", f"v{versions - 1}"))
    conn.close()
    with sqlite3.connect(folder / "learnings.db") as conn:  # the release's learnings table
        types = {"text": "TEXT", "integer": "INTEGER", "float": "FLOAT"}
        conn.execute(f"CREATE TABLE learnings ({', '.join(f'{c} {types[t]}' for c, t in LEARNING_COLUMNS.items())}, "
                     "PRIMARY KEY (id))")
        for n in range(learnings):
            conn.execute("INSERT INTO learnings (id, tenant, agent, status, text, proposed_at, provenance, dedup) "
                         "VALUES (?, 'default', ?, 'proposed', 'x', ?, '[]', ?)", (f"l{n}", f"a{n % agents}", n, n))
    conn.close()


def _per_call(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench_catalog")
    parser.add_argument("--agents", type=int, default=200)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--learnings", type=int, default=2000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        _old_files(folder, args.agents, args.versions, args.learnings)
        started = time.perf_counter()
        catalog = AgentCatalog(folder / "catalog.db")
        opened = time.perf_counter() - started
        learnings = LearningStore(folder / "learnings.db")
        rows = args.agents * args.versions
        print(f"open (upgrade when older) of {rows} agent versions: {opened * 1000:.1f} ms")
        for label, fn, repeat in (
            ("history(agent)", lambda: catalog.history("a7"), 200),
            ("status(agent, version)", lambda: catalog.status("a7", "v3"), 2000),
            ("live_version(agent)", lambda: catalog.live_version("a7"), 2000),
            ("blocked()", catalog.blocked, 20),
            (f"learnings.rows(agent=) of {args.learnings}", lambda: learnings.rows(agent="a7"), 20),
        ):
            print(f"{label}: {_per_call(fn, repeat):.0f} us (median of {repeat})")
        catalog.close()
        learnings.close()


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
