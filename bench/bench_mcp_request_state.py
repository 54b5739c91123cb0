"""What the gateway's `requestState` costs per waiting call: issuing one (an HMAC-SHA256 over
canonical JSON) and verifying a retry's (MAC, expiry, principal, call digest, spent list), in
process, with the spent list holding `--spent` earlier approvals. Median and p99 of N rounds.

    .venv/bin/python -m bench.bench_mcp_request_state [--rounds N] [--spent N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from warden.client.runs import call_digest
from warden.mcp.request_state import RequestStates
from warden.mcp.settings import Client


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20_000)
    parser.add_argument("--spent", type=int, default=1_000)
    args = parser.parse_args(argv)
    states = RequestStates(os.urandom(32))
    for n in range(args.spent):
        states.spend(f"earlier-{n}")
    who = Client("stdio", "alice", "files", "acme")
    call = call_digest("fs__write_file", {"path": "/srv/shared/report.md", "content": "x" * 2000})
    issue, verify = [], []
    for n in range(args.rounds):
        started = time.perf_counter()
        state = states.issue(who, "run-1", f"approval-{n}", "fs", call)
        issued = time.perf_counter()
        states.verify(state, who, "run-1", "fs", call)
        verified = time.perf_counter()
        issue.append(issued - started)
        verify.append(verified - issued)
    for name, times in (("issue", issue), ("verify", verify)):
        times.sort()
        print(f"{name:6}  p50 {statistics.median(times) * 1e6:6.1f} us  p99 {times[int(len(times) * 0.99)] * 1e6:6.1f} us"
              f"  ({args.rounds} rounds, {args.spent} spent)")


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
