"""Builds a Driver wired to real servers, with a scripted model, for the loop tests."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from driver.clients import CheckpointClient, ToolRunnerClient
from driver.goal import parse_goal
from driver.loop import Driver
from driver.pricing import Prices
from driver.providers import make_provider
from driver.runs.model import Run
from driver.runs.sqlite import SqliteRunStore
from driver.runs.store import RunStore

# The driver's bearer token for the toolrunner's Cancel and GetReceipt (the test toolrunner admits it).
TOOLRUNNER_TOKEN = "driver-test-token-" + secrets.token_hex(8)
# The driver's checkpoint credential (principal `driver`), and a person's own (bob, principal `people`).
CHECKPOINT_TOKEN = "driver-cp-token-" + secrets.token_hex(8)
PERSON_TOKEN = "bob-cp-token-" + secrets.token_hex(8)

PLAN = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
    {"id": "list", "tool": "list_templates"},
    {"id": "scan", "tool": "create_task_from_template"},
    {"id": "check", "tool": "get_task"},
]}}


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"action": "tool_call", "tool": tool, "arguments": arguments}


def final(**evidence: str) -> dict[str, Any]:
    return {"action": "final", "summary": "done",
            "outcomes": [{"criterion": k, "met": True, "evidence": v} for k, v in evidence.items()]}


def goal(**budget: Any) -> Any:
    return parse_goal({
        "objective": "Scan web.lab.example.com with the web template and report the task status.",
        "criteria": [
            {"id": "scan_ran", "description": "a scan task was created",
             "check": {"kind": "receipt_ok", "tool": "create_task_from_template"}},
            {"id": "reported", "description": "the task status is reported with evidence"},
        ],
        "constraints": ["lab hosts only"],
        "budget": budget,
    })


class Stack:
    def __init__(self, tmp: Path, policy_dir: Path, checkpoint: str, toolrunner: str) -> None:
        self.tmp = tmp
        self.policy_dir = policy_dir
        self.checkpoint_address = checkpoint
        self.toolrunner_address = toolrunner
        self.db = tmp / "driver.db"
        self.drivers: list[Driver] = []

    def driver(self, *, checkpoint: str | None = None, toolrunner: str | None = None,
               store: RunStore | None = None) -> Driver:
        """A driver on the stack's SQLite file, or on `store` (a shared PostgreSQL one)."""
        store = store if store is not None else SqliteRunStore(self.db)
        d = Driver(store, CheckpointClient(checkpoint or self.checkpoint_address, timeout=5, token=CHECKPOINT_TOKEN),
                   ToolRunnerClient(toolrunner or self.toolrunner_address, timeout=60, token=TOOLRUNNER_TOKEN),
                   lambda name, model, options: make_provider(name, **options),
                   prices=Prices.from_policy_dir(self.policy_dir), provider_backoff_seconds=0)
        self.drivers.append(d)
        return d

    def start(self, d: Driver, script: list[Any], g: Any = None, *, agent: str = "recon",
              mode: str = "interactive") -> Run:
        run = d.start_run(agent, g or goal(), owner="alice", mode=mode, provider="scripted",
                          provider_options={"script": script}, spawn=False)
        return d.run_until_stopped(run.run_id)

    def approval_token(self, d: Driver, approval_id: str, note: str = "") -> str:
        """What `warden approve` gets: bob approves at the checkpoint with his own credential."""
        approval = d.store.approval(approval_id)
        person = CheckpointClient(self.checkpoint_address, timeout=5, token=PERSON_TOKEN)
        try:
            got = person.approve(approval.run_id, approval.decision_id, note)
        finally:
            person.close()
        assert got.approval_token, got.decision
        return got.approval_token

    def close(self) -> None:
        for d in self.drivers:
            d.stop()
            d.store.close()


def kinds(d: Driver, run_id: str) -> list[str]:
    return [e.kind for e in d.store.events(run_id)]


def decisions(d: Driver, run_id: str) -> list[tuple[str, str, str]]:
    return [(e.data["action"], e.data["verdict"], e.data["code"])
            for e in d.store.events(run_id) if e.kind == "decision"]
