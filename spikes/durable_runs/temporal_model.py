"""The run model on Temporal: activities for the model turn, the check and the tool execution; an
approval wait on a signal with a timeout; pause and resume as signals; cancel is Temporal's."""
import asyncio, os
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    import temporal_acts as acts

STEP = dict(start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=timedelta(seconds=5),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)))
EXTRA_STEP = os.environ.get("RUN_MODEL", "v1") == "v2-changed"  # a deploy that changed the workflow code


@workflow.defn
class Run:
    def __init__(self) -> None:
        self.answer: str | None = None
        self.paused = False
        self.state = "running"

    @workflow.signal
    def approval(self, answer: str) -> None:
        self.answer = answer

    @workflow.signal
    def pause(self) -> None:
        self.paused = True

    @workflow.signal
    def resume(self) -> None:
        self.paused = False

    @workflow.query
    def status(self) -> str:
        return "paused" if self.paused else self.state

    @workflow.run
    async def run(self, run_id: str, needs_approval: bool, approval_timeout: float, turn_seconds: float = 0.0) -> str:
        if EXTRA_STEP:
            await workflow.execute_activity(acts.noop, 0, **STEP)
        await workflow.execute_activity(acts.model_turn, args=[run_id, 1], **STEP)
        if await workflow.execute_activity(acts.check, args=[run_id, needs_approval], **STEP) == "REQUIRE_APPROVAL":
            self.state = "awaiting_approval"
            try:
                await workflow.wait_condition(lambda: self.answer is not None, timeout=timedelta(seconds=approval_timeout))
            except asyncio.TimeoutError:  # a wait that times out is a refusal
                await workflow.execute_activity(acts.record, args=[run_id, "refused_timeout"], **STEP)
                return "refused"
            if self.answer != "approve":
                await workflow.execute_activity(acts.record, args=[run_id, "rejected"], **STEP)
                return "refused"
            self.state = "approved"
        if turn_seconds:
            await workflow.sleep(turn_seconds)
        await workflow.wait_condition(lambda: not self.paused)
        await workflow.execute_activity(acts.execute_tool, args=[run_id, f"{run_id}:call-1"], **STEP)
        await workflow.execute_activity(acts.model_turn, args=[run_id, 2], **STEP)
        await workflow.execute_activity(acts.record, args=[run_id, "succeeded"], **STEP)
        return "succeeded"


@workflow.defn
class Steps:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(acts.noop, i, start_to_close_timeout=timedelta(seconds=30))
        return n
