"""The driver's side of learnings (docs/learnings.md): advice, never authority.

- At the start of a run (a child's too) the lessons about its agent, the checkpoint's active
  learnings, go into the model's context as data from the catalog, naming who reviewed them;
  never into the system prompt.
- A failed run and a failed task (a tool call the toolrunner ran that did not succeed) are
  reported to the checkpoint as proposed learnings, under the run's token. Best effort: a run
  never fails because a proposal could not be made (an event says so). A call the
  infrastructure cut short (`task_failure`) is no lesson about the task and is never proposed.
- The agent may propose one itself through the built-in `propose_learning` action (not a tool of
  any allowlist): the checkpoint records it, capped at `warning`, and the model is told, as data,
  that a person will review it.
- A Check answer's learnings (warnings of a call that still runs) reach the model as data before
  the call's result.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from driver import context
from driver.errors import DriverError
from driver.runs.model import EventKind, Run
from warden.checkpoint.v1 import checkpoint_pb2 as cp

if TYPE_CHECKING:
    from driver.loop import Driver

log = logging.getLogger("warden.driver.learnings")


class Lesson(BaseModel):
    """The arguments of `propose_learning` (see context.learn_tool_schema)."""

    model_config = ConfigDict(extra="forbid")
    lesson: str = Field(min_length=1, max_length=2000)
    tool: str = Field("", max_length=100)
    severity: Literal["warning", "error"] = "warning"


def load_lessons(driver: Driver, run_id: str) -> None:
    """Put the active learnings about the run's agent into its context, as data."""
    run = driver.store.run(run_id)
    try:
        found = driver.checkpoint.run_lessons(cp.RunContext(run_token=run.run_token))
    except DriverError as exc:  # advice: the run goes on without it, and says so
        driver.store.append_event(run_id, EventKind.LESSONS_UNAVAILABLE, code=exc.code, message=exc.message[:500])
        return
    if not found:
        return
    items = [{"id": x.id, "severity": x.severity, "text": x.text, "reviewed_by": x.reviewed_by,
              "reviewed_at": x.reviewed_at} for x in found]
    driver.store.add_transcript(run_id, {"role": "user", "text": context.lessons(run.agent, items)})
    driver.store.append_event(run_id, EventKind.LESSONS_LOADED, learnings=[
        {"id": i["id"], "severity": i["severity"], "reviewed_by": i["reviewed_by"]} for i in items])


# Receipt codes of calls cut short by the infrastructure, not by the tool or its arguments: the
# runner died while the call ran (`interrupted`) or failed around it (`runner_error`), the engine
# could not run the container (`container_not_run`), or the call was stopped (`cancelled`).
INFRASTRUCTURE_CODES = frozenset({"interrupted", "runner_error", "container_not_run", "cancelled"})


def task_failure(code: str, exit_code: int, timed_out: bool) -> str:
    """What a receipt's failure is called when it is the task's own ("timeout", "exit_2", a
    receipt code); "" when the call succeeded or the infrastructure cut it short."""
    if code in INFRASTRUCTURE_CODES:
        return ""
    if code:
        return code
    if timed_out:
        return "timeout"
    return "" if exit_code == 0 else f"exit_{exit_code}"


def report(driver: Driver, run: Run, source: cp.LearningSource, code: str, text: str, *,
           tool: str = "", decision_id: str = "") -> None:
    """A failed run or task becomes a proposed learning at the checkpoint (best effort)."""
    try:
        resp = driver.checkpoint.propose_learning(cp.ProposeLearningRequest(
            run=cp.RunContext(run_token=run.run_token), source=source, code=code[:100], text=text[:2000],
            tool=tool, decision_id=decision_id))
    except DriverError as exc:
        driver.store.append_event(run.run_id, EventKind.LEARNING_NOT_PROPOSED, code=exc.code, message=exc.message[:500])
        return
    d = resp.decision
    if d.verdict != cp.VERDICT_ALLOW:
        driver.store.append_event(run.run_id, EventKind.LEARNING_NOT_PROPOSED, code=d.code, message=d.reason[:500])
        return
    driver.store.append_event(run.run_id, EventKind.LEARNING_PROPOSED, learning=resp.learning.id, source=resp.learning.source,
                              code=code, occurrences=resp.learning.occurrences, decision_id=d.decision_id)


def propose(driver: Driver, run: Run, call: dict[str, Any], lesson: Lesson) -> None:
    """The agent's own proposal: recorded by the checkpoint, the outcome to the model as data."""
    resp = driver.checkpoint.propose_learning(cp.ProposeLearningRequest(
        run=cp.RunContext(run_token=run.run_token), source=cp.LEARNING_SOURCE_AGENT, text=lesson.lesson,
        tool=lesson.tool, severity=lesson.severity))
    d = resp.decision
    driver.store.append_event(run.run_id, EventKind.DECISION, action="learning", verdict=cp.Verdict.Name(d.verdict)
                              .removeprefix("VERDICT_"), code=d.code, rule=d.rule, reason=d.reason,
                              decision_id=d.decision_id, learning=resp.learning.id)
    if d.verdict != cp.VERDICT_ALLOW:
        driver.store.update_call(call["id"], status="done", verdict="DENY", code=d.code, decision_id=d.decision_id,
                                 result={"is_error": True, "content": context.refusal_result(d.code, d.reason)})
        driver.store.add_to_run(run.run_id, consecutive_failures=1)
        return
    capped = " It is kept at warning until a person reviews it." if resp.learning.severity_capped else ""
    text = (f"Learning {resp.learning.id} proposed (decision {d.decision_id}); a person reviews it.{capped} "
            "Nothing you may do changes.")
    driver.store.update_call(call["id"], status="done", verdict="ALLOW", code=d.code, decision_id=d.decision_id,
                             result={"is_error": False, "content": context.note(text)})


def advice(resp: cp.CheckResponse) -> str:
    """A Check answer's learnings as data for the model ("" when there are none)."""
    if not resp.learnings:
        return ""
    return context.advice([{"id": n.id, "severity": n.severity, "text": n.text, "reviewed_by": n.reviewed_by}
                           for n in resp.learnings])
