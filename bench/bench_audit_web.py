"""The auditor's web view (`warden audit serve`) over a large log: what one answer costs over real
HTTP on loopback, for the page's requests.

    .venv/bin/python bench/bench_audit_web.py [--records 100000] [--repeat 5]

The log is bench_agent_stats's mix (runs of 10 records, some tripping a breaker), every other run
in a second tenant, so an auditor of one tenant reads half of it. Figures are medians of `repeat`
requests each, after one to warm up; the stats read is timed first (a fold of the whole log) and
then warm (only what is new).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.bench_agent_stats import RECORDS_PER_RUN, run_records  # noqa: E402
from checkpoint.audit import DecisionLog  # noqa: E402

AUDITOR_TOKEN = "carol-bench-token-0123456789"
POLICIES = {
    "tenants/acme.yaml": "kind: Tenant\nname: acme\nroles:\n  admin: [alice]\n  auditor: [carol]\n",
    "tenants/globex.yaml": "kind: Tenant\nname: globex\nroles:\n  admin: [gina]\n",
    "principals/people.yaml": "kind: Principal\nname: people\nidentities: ['token:*']\naudit:\n  tenants: [acme, globex]\n",
}


def fill(path: Path, records: int) -> None:
    log = DecisionLog(path)
    try:
        for n in range(records // RECORDS_PER_RUN):
            for record in run_records(n):
                if n % 2:
                    record["tenant"] = "globex"
                log.append(record)
    finally:
        log.close()


def timed(url: str, repeat: int, *, warm: bool = True) -> tuple[float, int]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {AUDITOR_TOKEN}"})
    times, size = [], 0
    for i in range(repeat + 1 if warm else 1):
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as answer:
            size = len(answer.read())
        if i or not warm:  # the first warms the page cache
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, size


def main(argv: list[str]) -> None:
    from checkpoint.audit.web.access import Gate
    from checkpoint.audit.web.server import make_server
    from checkpoint.audit.web.views import DecisionViews

    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, text in POLICIES.items():
            (root / "policies" / name).parent.mkdir(parents=True, exist_ok=True)
            (root / "policies" / name).write_text(text)
        tokens = root / "tokens"
        tokens.write_text(f"carol {AUDITOR_TOKEN}\n")
        os.chmod(tokens, 0o600)
        started = time.perf_counter()
        fill(root / "decisions.db", args.records)
        print(f"log: {args.records} records in {time.perf_counter() - started:.1f} s; half of them acme's", flush=True)
        views = DecisionViews(root / "decisions.db", verify_interval=0)
        server = make_server("127.0.0.1", 0, Gate(tokens, root / "policies"), views)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.port}"
        try:
            first_stats = timed(base + "/api/stats", 1, warm=False)
            run = f"run-{args.records // RECORDS_PER_RUN // 4 * 2:08d}"  # an acme run (even) mid-log
            cases = [
                ("stats, first read (folds the whole log)", None, first_stats),
                ("stats, warm", "/api/stats", None),
                ("newest 200 decisions", "/api/decisions?limit=200", None),
                ("newest 200 HALT decisions (a rare verdict)", "/api/decisions?limit=200&verdict=HALT", None),
                ("decisions of one run (indexed)", f"/api/decisions?run={run}", None),
                ("a long poll with nothing new (wait=0)", f"/api/decisions?after={args.records}&limit=500", None),
                ("a run's tree and timeline", f"/api/runs/{run}", None),
                ("runs most recently started (200), with counts", "/api/runs?limit=200", None),
                ("runs with a refusal (reads up to 500 runs)", "/api/runs?limit=200&refused=1", None),
                ("chain status while the last walk is fresh", "/api/verify", None),
            ]
            print(f"{'request':<48} {'median ms':>10} {'bytes':>10}")
            for label, path, given in cases:
                ms, size = given if given is not None else timed(base + path, args.repeat)
                print(f"{label:<48} {ms:>10.1f} {size:>10}", flush=True)
            walks = []
            for _ in range(max(1, args.repeat // 2)):
                views._verified = None  # forget the last walk: this request walks the chain
                walks.append(views.verify()["walk_seconds"] * 1000)
            print(f"{'one walk of the whole chain (verify)':<48} {statistics.median(walks):>10.1f}", flush=True)
        finally:
            server.shutdown()
            server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
