"""The run model's steps as Temporal activities (the same bodies as the DBOS steps, in common.py)."""
from temporalio import activity

import common

DB = "temporal_app"


@activity.defn
def model_turn(run_id: str, turn: int) -> str:
    return common.model_turn(DB, run_id, turn)


@activity.defn
def check(run_id: str, needs_approval: bool) -> str:
    return common.check(DB, run_id, needs_approval)


@activity.defn
def execute_tool(run_id: str, key: str) -> str:
    return common.execute_tool(DB, run_id, key)


@activity.defn
def record(run_id: str, outcome: str) -> None:
    common.record_outcome(DB, run_id, outcome)


@activity.defn
def noop(i: int) -> int:
    return i
