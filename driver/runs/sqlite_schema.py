"""The SQLite run store's tables and how a row reads back as a typed record.

Tables (sqlite-utils, WAL):
- runs: one row per run: pinned agent version, status, pause code, counters, budget, and for a
  child run its parent, tree root, depth, chain of authority and the checkpoint's chain token;
- goals: (run_id, version) -> the goal a person wrote; amendments add versions;
- events: the append-only event log of every run (seq is global and increasing);
- transcript: the model-visible conversation, kept apart from run state;
- calls: every tool call the model proposed, per turn, with its decision and result (a delegation
  is a call whose result is the child run's outcome), and the driver's own calls that verify a
  final report's `call_ok` criteria (`verifies`);
- approvals: REQUIRE_APPROVAL answers waiting for, or decided by, a person;
- receipts: the toolrunner's receipts, by decision id (`verifies` names the criterion when the
  call was the driver's own check, not the run's work);
- spend: USD per model call, for the daily owner and tenant allowances;
- pauses: a person's pause of a run (or its reach to a child run) as an intent, written before
  the act goes on the checkpoint's record and closed in the same transaction that holds the
  run, so a driver that stops in between applies it on restart, once.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from driver.errors import RunStateError
from driver.runs.model import JSON_RUN_FIELDS, Approval, Pause, PauseState, Run, RunStatus

RUN_COLUMNS: dict[str, Any] = {
    "run_id": str, "agent": str, "agent_version": str, "tenant": str, "owner": str, "mode": str,
    "provider": str, "provider_options": str, "model": str, "note": str, "status": str, "code": str, "reason": str, "goal_version": int,
    "budget": str, "persona": str, "tool_specs": str, "policy_revision": str, "plan": str,
    "has_plan": int, "created_at": float, "updated_at": float, "stretch_started_at": float,
    "stretch": int, "stretch_first_turn": int, "stretch_tokens": int, "stretch_turns": int, "total_turns": int, "total_tokens": int,
    "consecutive_failures": int, "drift": int, "provider_refusals": int, "provider_refused_for_good": int,
    "spend_usd": float, "descendant_stretch_turns": int, "descendant_total_turns": int,
    "model_attempts": int, "turn": int, "nudged": int, "missing": str,
    "parent_run_id": str, "root_run_id": str, "depth": int, "run_token": str, "delegates": str,
    "final": str,
    "paused_by": str,  # the person whose pause (code paused / parent_paused) holds the run
    "skills": str,  # the skills the run pinned (name, version, description: never the text)
}
CALL_COLUMNS: dict[str, Any] = {
    "id": int, "run_id": str, "turn": int, "idx": int, "call_id": str, "tool": str,
    "arguments": str, "args_sha": str, "plan_step": str, "status": str, "result": str,
    "decision_id": str, "grant": bytes, "verdict": str, "code": str, "approval_id": str, "child_run_id": str,
    "verifies": str,  # the criterion a call the driver made itself verifies (call_ok); "" for the model's
    # the arguments the grant covers when the checkpoint filled some in (a template's spec): what
    # the toolrunner is sent; `arguments` stay the proposed ones, which a new check decides again
    "granted_arguments": str,
}
RECEIPT_COLUMNS: dict[str, Any] = {"decision_id": str, "run_id": str, "tool": str, "exit_code": int, "code": str,
                                    "output": str, "receipt": str, "created_at": float, "verifies": str}


# A pause's life: see PauseState.
PAUSE_COLUMNS: dict[str, Any] = {
    "pause_id": str, "run_id": str, "code": str, "person": str, "reason": str, "note": str,
    "parent_run_id": str, "state": str, "created_at": float,
}


def call_row(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "arguments": json.loads(r["arguments"]), "result": json.loads(r["result"]) if r["result"] else None}


def run_row(row: dict[str, Any]) -> Run:
    """A stored row as a Run; a row that does not read as one (a field that is not JSON, a status
    no driver writes) is refused, never guessed at: `run_state_unavailable`."""
    try:
        for k in JSON_RUN_FIELDS:
            row[k] = json.loads(row[k]) if row[k] else None
        # JSON fields that hold a collection are never null in a Run (a row an older driver wrote
        # may have them empty)
        for k, empty in (("budget", {}), ("provider_options", {}), ("missing", []), ("delegates", []),
                         ("tool_specs", [])):
            if row[k] is None:
                row[k] = empty
        row["status"] = RunStatus(row["status"])
    except (ValueError, TypeError) as exc:
        raise RunStateError(f"run {row.get('run_id')!r} cannot be read: {exc}",
                            code="run_state_unavailable") from None
    return Run(**row)


def approval_row(row: dict[str, Any]) -> Approval:
    return Approval(**{**row, "arguments": json.loads(row["arguments"]), "deadline": row.get("deadline") or 0.0})


def pause_row(row: dict[str, Any]) -> Pause:
    return Pause(**{**row, "state": PauseState(row["state"])})



def create(db: sqlite_utils.Database) -> None:
    """Make the tables of a new file; a file an older driver wrote gains the newer columns."""
    if "runs" not in db.table_names():
        db.table("runs").create(RUN_COLUMNS, pk="run_id")
        db.table("goals").create({"run_id": str, "version": int, "goal": str, "author": str, "created_at": float},
                           pk=("run_id", "version"))
        db.table("events").create({"seq": int, "run_id": str, "time": float, "kind": str, "data": str}, pk="seq")
        db.table("events").create_index(["run_id", "seq"])
        db.table("transcript").create({"id": int, "run_id": str, "entry": str}, pk="id")
        db.table("transcript").create_index(["run_id", "id"])
        db.table("calls").create(CALL_COLUMNS, pk="id")
        db.table("calls").create_index(["run_id", "turn"])
        db.table("approvals").create({
            "approval_id": str, "run_id": str, "call": int, "decision_id": str, "tool": str,
            "arguments": str, "code": str, "rule": str, "reason": str, "status": str,
            "decided_by": str, "decided_at": float, "note": str, "created_at": float, "token": str,
            "deadline": float,
        }, pk="approval_id")
        db.table("receipts").create(RECEIPT_COLUMNS, pk="decision_id")
        db.table("spend").create({"id": int, "day": str, "owner": str, "tenant": str, "run_id": str,
                            "usd": float}, pk="id")
        db.table("spend").create_index(["day", "owner"])
    # A store written by an older driver gains the newer columns (empty), nothing else changes.
    for table, columns in (("runs", RUN_COLUMNS), ("calls", CALL_COLUMNS), ("approvals", {"token": str, "deadline": float}),
                           ("receipts", RECEIPT_COLUMNS)):
        have = set(db.table(table).columns_dict)
        for name, typ in columns.items():
            if name not in have:
                db.table(table).add_column(name, typ, not_null_default="" if typ is str else 0)
    db.table("runs").create_index(["parent_run_id"], if_not_exists=True)
    db.table("runs").create_index(["root_run_id"], if_not_exists=True)
    if "pauses" not in db.table_names():
        db.table("pauses").create(PAUSE_COLUMNS, pk="pause_id")
    # One open pause per run: a second person's pause while one is under way is refused,
    # and a cascade that reaches a run twice adds nothing.
    db.execute("CREATE UNIQUE INDEX IF NOT EXISTS pauses_open ON pauses (run_id) "
                    "WHERE state IN ('intent', 'recorded')")

