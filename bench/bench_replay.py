"""`warden policy diff` replay rate: recorded decisions replayed per second against a candidate
folder (target: at least 5,000 a second), reading a decision log from disk as the command does.

The log: N tool calls of the shipped recon agent (a mix of allowed calls, scope and allowlist
refusals, schema refusals) spread over runs, each run with its start_run record, written through
DecisionLog. The candidate: the shipped folder with get_task removed from recon's allowlist.

    .venv/bin/python -m bench replay            (or: python bench/bench_replay.py --records N)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CALLS = [
    ("get_task", {"task_id": "task-1"}),
    ("list_templates", {}),
    ("create_task_from_template", {"template": "web-basic", "target": "www.lab.example.com",
                                   "node": "lab-node-1", "image": "recon/nmap:7.94"}),
    ("create_task_from_template", {"template": "web-basic", "target": "example.org"}),
    ("cancel_task", {"task_id": "task-1"}),
    ("get_task", {"task_id": "../../etc/passwd"}),
]
PER_RUN = 20


def write_log(path: Path, records: int) -> int:
    """A decision log of `records` recon tool calls (decided by the shipped policies); returns
    how many get_task calls were ALLOWed (the flips the candidate must find)."""
    from checkpoint.audit import DecisionLog
    from checkpoint.engine import InvalidRequest, decide
    from checkpoint.policy import load_policy_dir
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    policies = load_policy_dir(ROOT / "policies")
    version = policies.agents["recon"].version
    expected = 0
    with DecisionLog(path) as log:
        for i in range(records):
            run_id = f"run-{i // PER_RUN}"
            chain = [{"kind": "person", "id": "alice"},
                     {"kind": "agent", "id": "recon", "agent_version": version, "run_id": run_id}]
            if i % PER_RUN == 0:
                log.append({"tenant": "acme", "run_id": run_id, "root_run_id": run_id, "actor_chain": chain,
                            "accountable_person": "alice", "agent": "recon", "agent_version": version,
                            "action": "start_run", "arguments": {"mode": "interactive", "inputs": None},
                            "verdict": "ALLOW", "code": "allowed", "rule": "start_run"})
            tool, args = CALLS[i % len(CALLS)]
            request = pb.CheckRequest(run=pb.RunContext(
                run_id=run_id, root_run_id=run_id, tenant="acme", mode=pb.RUN_MODE_INTERACTIVE,
                actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                             pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon", agent_version=version, run_id=run_id)],
            ), tool_call=pb.ToolCall(tool=tool))
            request.tool_call.arguments.update(args)
            try:
                response = decide(policies, request)
                verdict, code, rule = pb.Verdict.Name(response.verdict).removeprefix("VERDICT_"), response.code, response.rule
            except InvalidRequest as exc:
                verdict, code, rule = "DENY", exc.code, "request.shape"
            expected += tool == "get_task" and verdict == "ALLOW"
            log.append({"tenant": "acme", "run_id": run_id, "root_run_id": run_id, "actor_chain": chain,
                        "accountable_person": "alice", "agent": "recon", "agent_version": version,
                        "action": "tool_call", "tool": tool, "arguments": args, "verdict": verdict,
                        "code": code, "rule": rule, "policy_revision": policies.revision})
    return expected


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench replay")
    parser.add_argument("--records", type=int, default=20_000)
    args = parser.parse_args(argv or [])

    from checkpoint.policy import load_policy_dir
    from checkpoint.replay import diff, read_facts, read_records, replaying

    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "decisions.db"
        print(f"writing a log of {args.records} recon tool calls ...", flush=True)
        expected = write_log(log_path, args.records)
        candidate = Path(tmp) / "candidate"
        shutil.copytree(ROOT / "policies", candidate)
        agent = candidate / "agents" / "recon.yaml"
        agent.write_text(agent.read_text().replace("get_task, ", ""))
        candidate_set = load_policy_dir(candidate)
        current_set = load_policy_dir(ROOT / "policies")
        runs = (("against the recorded answers", None, True), ("against --policies (two replays)", current_set, True),
                ("against the recorded answers, no memo", None, False))
        for label, current, memo in runs:
            replaying.Answers.MAX = 100_000 if memo else 0  # 0: every decision decided afresh
            started = time.perf_counter()
            report = diff(read_records(log_path), candidate_set, current=current, facts_from=read_facts(log_path))
            elapsed = time.perf_counter() - started
            assert report.replayed == args.records and len(report.flips) == expected, (report.replayed, len(report.flips))
            print(f"replay {label:<34} {report.replayed:>7} decisions in {elapsed:6.2f} s: "
                  f"{report.replayed / elapsed:>8,.0f} decisions/s ({len(report.flips)} flips)", flush=True)
    replaying.Answers.MAX = 100_000
    print("memo: a run's repeated identical calls (same request bytes, run ids included) are decided once")
    print("target: >= 5,000 replayed decisions/s")


if __name__ == "__main__":
    main(sys.argv[1:])
