"""The calls of a turn, each taken a step further: waiting for a person or a child, executing
with its grant, or decided by the checkpoint. The built-in tools (plan, delegate, proposals,
skills, learnings) go to their own step; every other call must fit the run's plan, and is
checked with the run's counters and executed when allowed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from driver import checks, context, learnings, skills
from driver.runs.model import AWAITING_APPROVAL, RUNNING, EventKind, Run
from driver.steps import delegation, proposals
from driver.steps.children import child_done
from driver.steps.execution import execute
from driver.steps.verdicts import attach_approval, not_allowed
from warden import canonical, tracing
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import struct_to_dict, to_struct

if TYPE_CHECKING:
    from driver.loop import Driver


def process_calls(driver: Driver, run: Run) -> None:
    for call in driver.store.calls(run.run_id, run.turn):
        if call["status"] == "done":
            continue
        with tracing.span("warden.tool.call", {"warden.tool": call["tool"], "warden.call.status": call["status"]}):
            if not process_call(driver, run.run_id, call):
                return


def process_first_call(driver: Driver, run: Run) -> str:
    """The first open call of the turn taken one step further (a durable workflow's step); what
    that step was: `execute` (a call the checkpoint allowed, sent with its stored grant), `check`
    (a call decided), or the call's status otherwise (`awaiting_approval`, `awaiting_child`)."""
    for call in driver.store.calls(run.run_id, run.turn):
        if call["status"] != "done":
            with tracing.span("warden.tool.call", {"warden.tool": call["tool"], "warden.call.status": call["status"]}):
                process_call(driver, run.run_id, call)
            return {"executing": "execute", "pending": "check", "approved": "check"}.get(call["status"], call["status"])
    return "none"


def process_call(driver: Driver, run_id: str, call: dict[str, Any]) -> bool:
    """Take one open call a step further; False when the run must stop here for now."""
    run = driver.store.run(run_id)
    if run.status != RUNNING:
        return False
    if call["status"] == "awaiting_approval":
        driver.store.transition(run_id, RUNNING, AWAITING_APPROVAL, call["code"], "waiting for a person")
        return False
    if call["status"] == "awaiting_child":
        return child_done(driver, run, call)
    if call["status"] == "executing":
        execute(driver, run, call)
        return True
    return decide_call(driver, run, call)


def decide_call(driver: Driver, run: Run, call: dict[str, Any]) -> bool:
    """Check one call; return False when the run stops advancing (approval, halt)."""
    store = driver.store
    if call["tool"] == context.PLAN_TOOL:
        return proposals.plan(driver, run, call)
    if call["tool"] == context.DELEGATE_TOOL:
        return delegation.delegate(driver, run, call)
    if call["tool"] == context.PROPOSE_TOOL:
        return proposals.propose_change(driver, run, call)
    if call["tool"] in skills.BUILTINS:
        return skills.handle(driver, run, call)
    if call["tool"] == context.LEARN_TOOL:  # a built-in action, never a tool of an allowlist
        lesson = checks.arguments(store, run, call, learnings.Lesson, "the learning")
        if lesson is not None:
            learnings.propose(driver, run, call, lesson)
        return True
    if not run.has_plan and not call["verifies"]:  # the plan gate is for the model's calls
        checks.refuse(store, run, call, "plan_required", "propose a plan with propose_plan before calling tools")
        store.append_event(run.run_id, EventKind.CALL_REFUSED, tool=call["tool"], code="plan_required")
        return True
    plan_step = match_step(run, call)
    tool_call = cp.ToolCall(tool=call["tool"], arguments=to_struct(call["arguments"]), plan_step=plan_step)
    req = cp.CheckRequest(run=checks.run_context(run), tool_call=tool_call,
                          counters=checks.counters(store, run, turn_tool_calls=checks.made_in_turn(store, run, call),
                                                   identical=store.identical_calls(
                                                       run.run_id, call["args_sha"], call["tool"], call["id"],
                                                       run.stretch_first_turn)))
    attach_approval(store, req, call)
    resp = driver.checkpoint.check(req)
    checks.record_decision(store, run, "tool_call", resp, tool=call["tool"], arguments=call["arguments"],
                           plan_step=plan_step, counts_as_drift=resp.counts_as_drift and not call["verifies"],
                           **({"verifies": call["verifies"]} if call["verifies"] else {}),
                           **({"learnings": [n.id for n in resp.learnings]} if resp.learnings else {}))
    if resp.counts_as_drift and not call["verifies"]:  # a goal's check is not the model wandering
        store.add_to_run(run.run_id, drift=1)
    if resp.verdict == checks.ALLOW:
        # a template tool's grant covers the arguments the checkpoint filled in: those are sent
        granted = json.dumps(struct_to_dict(resp.arguments, checked=False)) if resp.HasField("arguments") else ""
        advice = learnings.advice(resp)
        # the grant (and the learnings' advice for the result) stored before the call is sent: a
        # driver that dies in between, or the one that takes the run over, sends the same grant
        store.update_call(call["id"], status="executing", decision_id=resp.decision_id, verdict="ALLOW",
                          code=resp.code, plan_step=plan_step, grant=resp.grant.SerializeToString(),
                          granted_arguments=granted, **({"result": {"advice": advice}} if advice else {}))
        if driver.durable is not None:
            return True  # a durable workflow's next step executes it (the check is a step of its own)
        execute(driver, store.run(run.run_id), store.calls(run.run_id, run.turn)[call["idx"]], advice=advice)
        return True
    return not_allowed(driver, run, call, resp)


def match_step(run: Run, call: dict[str, Any]) -> str:
    """The plan step a call carries out: the one it names, else one of the same tool whose
    arguments are the call's, else one of the same tool that left them open."""
    steps = (run.plan or {}).get("steps") or []
    if call["plan_step"] and any(s["id"] == call["plan_step"] and s["tool"] == call["tool"] for s in steps):
        return str(call["plan_step"])
    same_tool = [s for s in steps if s["tool"] == call["tool"]]
    exact = [s for s in same_tool if s.get("arguments") is not None
             and canonical.sha256_hex(s["arguments"]) == call["args_sha"]]
    loose = [s for s in same_tool if s.get("arguments") is None]
    chosen = (exact or loose)[:1]
    return str(chosen[0]["id"]) if chosen else ""
