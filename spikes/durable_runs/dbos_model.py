"""The run model on DBOS Transact: a workflow whose steps are a model turn, a check and a tool
execution, with a durable approval wait (recv with a timeout)."""
from dbos import DBOS

import common

DB = "app"


@DBOS.step()
def model_turn(run_id: str, turn: int) -> str:
    return common.model_turn(DB, run_id, turn)


@DBOS.step()
def check(run_id: str, needs_approval: bool) -> str:
    return common.check(DB, run_id, needs_approval)


@DBOS.step()
def execute_tool(run_id: str, key: str) -> str:
    return common.execute_tool(DB, run_id, key)


@DBOS.step()
def record(run_id: str, outcome: str) -> None:
    common.record_outcome(DB, run_id, outcome)


@DBOS.workflow()
def run(run_id: str, needs_approval: bool, approval_timeout: float, turn_seconds: float = 0.0) -> str:
    model_turn(run_id, 1)
    if check(run_id, needs_approval) == "REQUIRE_APPROVAL":
        DBOS.set_event("state", "awaiting_approval")
        answer = DBOS.recv("approval", timeout_seconds=approval_timeout)
        if answer != "approve":  # None: the wait timed out, which is a refusal
            record(run_id, "refused_timeout" if answer is None else "rejected")
            return "refused"
        DBOS.set_event("state", "approved")
    if turn_seconds:
        DBOS.sleep(turn_seconds)  # a long model turn, so a pause/cancel lands mid-run
    execute_tool(run_id, f"{run_id}:call-1")
    model_turn(run_id, 2)
    record(run_id, "succeeded")
    return "succeeded"


@DBOS.workflow()
def steps(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@DBOS.step()
def noop(i: int) -> int:
    return i
