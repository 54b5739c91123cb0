"""The model's turn: the last turn's results (and any note) answered first, the model call
checked by the checkpoint (it may need a person's approval), then the reply decided against the
tools offered: calls to take, a rejection, an idle answer (nudged once, then paused), a handoff
or a final report."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from driver import checks, context, skills
from driver.boundary import Final, Handoff, Idle, Rejection, ToolCalls, decide
from driver.errors import ProviderError
from driver.providers.base import ModelRequest, ToolDef, estimate_tokens
from driver.runs.model import AWAITING_APPROVAL, RUNNING, EventKind, Run
from driver.steps.ends import pause_run
from driver.steps.final import verify_final
from warden import canonical, tracing
from warden.checkpoint.v1 import checkpoint_pb2 as cp

if TYPE_CHECKING:
    from driver.loop import Driver

NUDGE = ("Your last answer started nothing and reported nothing. Call one of your tools, or answer "
         "with the final JSON object, or hand off. Another such answer pauses the run.")
MAX_TOKENS = 2048


def flush_feedback(driver: Driver, run: Run) -> None:
    """Before the next model call: answer every tool_use of the last reply, then any note."""
    store = driver.store
    run_id = run.run_id
    transcript = store.transcript(run_id)
    if transcript and transcript[-1]["role"] == "assistant":
        # the driver's own verification calls are not the model's: it gets no result for them
        calls = {c["call_id"]: c for c in store.calls(run_id, run.turn) if not c["verifies"]}
        results: list[dict[str, Any]] = []
        answered: set[str] = set()  # a provider pairs each tool call id with one result
        for action in transcript[-1]["reply"].get("actions") or []:
            if not (isinstance(action, dict) and action.get("action") == "tool_call" and action.get("id")):
                continue
            if action["id"] in answered:
                continue
            answered.add(action["id"])
            c = calls.get(action["id"])
            if c is not None and c["result"]:
                results.append({"call_id": action["id"], **c["result"]})
            else:
                results.append({"call_id": action["id"], "is_error": True,
                                "content": context.refusal_result("not_run", "this call did not run")})
        # scripted replies carry no tool_use ids: their results are listed by the loop's ids
        if not results:
            results = [{"call_id": c["call_id"], **c["result"]} for c in calls.values() if c["result"]]
        store.add_transcript(run_id, {"role": "results", "results": results, "text": ""})
    if run.note:
        store.add_transcript(run_id, {"role": "user", "text": context.note(run.note)})
        store.update_run(run_id, note="")


def offered_tools(run: Run) -> list[ToolDef]:
    """The run's pinned tools and the driver's built-in ones, as the model is offered them."""
    delegates = run.delegates or []
    tools = [ToolDef(name=s["name"], description=s["description"], input_schema=s["input_schema"])
             for s in run.tool_specs]
    tools.append(ToolDef(name=context.PLAN_TOOL, description="Propose your plan before any other tool call.",
                         input_schema=context.PLAN_TOOL_SCHEMA))
    if delegates:
        tools.append(ToolDef(name=context.DELEGATE_TOOL, description="Start a child run of another agent.",
                             input_schema=context.delegate_tool_schema(delegates)))
    tools.append(ToolDef(name=context.PROPOSE_TOOL, description="Propose a change to an agent's definition; "
                         "a tenant admin reviews it, and until then nothing changes.",
                         input_schema=context.propose_tool_schema()))
    tools += skills.tool_defs(run)
    tools.append(ToolDef(name=context.LEARN_TOOL, description="Propose a lesson for later runs of this agent; "
                         "a person reviews it.", input_schema=context.learn_tool_schema()))
    return tools


def model_turn(driver: Driver, run: Run) -> None:
    store = driver.store
    run_id = run.run_id
    waiting = next((a for a in store.approvals(run_id, status="pending")
                    if a.tool == checks.MODEL_CALL_APPROVAL), None)
    if waiting is not None:
        # A run paused while its model call waited for a person, then resumed: it waits for
        # that approval again rather than ask for a second one.
        store.transition(run_id, RUNNING, AWAITING_APPROVAL, waiting.code, waiting.reason)
        return
    flush_feedback(driver, run)
    run = store.run(run_id)
    transcript = store.transcript(run_id)
    system = context.system_prompt(run.persona, can_delegate=bool(run.delegates)) + skills.prompt(run)
    tools = offered_tools(run)
    input_estimate = estimate_tokens(system + str(transcript))
    if not _model_call_allowed(driver, run, input_estimate):
        return
    provider = driver.provider_factory(run.provider, run.model, run.provider_options or {})
    attempt = run.model_attempts
    store.add_to_run(run_id, model_attempts=1)
    try:
        with tracing.span("warden.model.call", {"gen_ai.system": run.provider, "gen_ai.request.model": run.model,
                                                "warden.attempt": attempt}):
            reply = provider.complete(ModelRequest(run_id=run_id, attempt=attempt, system=system,
                                                   transcript=transcript, tools=tools, max_tokens=MAX_TOKENS))
    except ProviderError as exc:
        # credit, quota and auth refusals do not heal by retrying: the checkpoint trips the
        # provider breaker on the next check, whatever the count
        store.add_to_run(run_id, provider_refusals=1,
                         provider_refused_for_good=int(exc.kind in ("credit", "quota", "auth")))
        store.append_event(run_id, EventKind.PROVIDER_REFUSED, kind=exc.kind, code=exc.code, status=exc.status,
                           message=exc.message[:500])
        if driver.provider_backoff_seconds:
            time.sleep(min(30.0, driver.provider_backoff_seconds * (2 ** run.provider_refusals)))
        return
    tokens = reply.input_tokens + reply.output_tokens
    usd = driver.prices.cost(run.model, reply.input_tokens, reply.output_tokens)
    # The reply's record is one transaction on a store that has them: a driver that dies while
    # storing it leaves no turn counted without its calls, and the turn is asked for again.
    with store.together():
        store.add_spend(run_id, run.owner, run.tenant, usd)
        # the turn counts for this run and, below them, for every run above it
        run = store.add_turn(run_id, stretch_tokens=tokens, total_tokens=tokens, stretch_turns=1,
                             total_turns=1, turn=1, spend_usd=usd)
        store.add_transcript(run_id, {"role": "assistant", "reply": reply.model_dump(mode="json")})
        decision = decide(reply, [t.name for t in tools])  # the contract: exactly the tools offered
        store.append_event(run_id, EventKind.MODEL_REPLY, turn=run.turn, kind=decision.kind,
                           input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                           stop_reason=reply.stop_reason, usd=usd, proposal=decision.model_dump(mode="json"))
        if isinstance(decision, ToolCalls):
            for i, call in enumerate(decision.calls):
                store.add_call(run_id, run.turn, i, call_id=call.call_id, tool=call.tool,
                               arguments=call.arguments, args_sha=canonical.sha256_hex(call.arguments),
                               plan_step=call.plan_step)
        elif isinstance(decision, Rejection):
            store.add_to_run(run_id, consecutive_failures=1)
            store.append_event(run_id, EventKind.REPLY_REJECTED, code=decision.code, detail=decision.detail)
            for i, call_id in enumerate(decision.call_ids):
                pk = store.add_call(run_id, run.turn, i, call_id=call_id, tool="", arguments={}, args_sha="", plan_step="")
                store.update_call(pk, status="done", verdict="REJECTED", code=decision.code,
                                  result={"is_error": True, "content": context.refusal_result(
                                      decision.code, decision.detail)})
            store.update_run(run_id, note=f"Your last reply was rejected ({decision.code}): {decision.detail}")
    if isinstance(decision, Idle):
        if run.nudged:
            pause_run(driver, run, "no_progress", "two turns in a row started nothing and reported nothing")
        else:
            store.update_run(run_id, nudged=1, note=NUDGE)
            store.append_event(run_id, EventKind.NUDGED)
    elif isinstance(decision, Handoff):
        pause_run(driver, run, decision.code, decision.reason or "the model handed the run to a person")
    elif isinstance(decision, Final):
        verify_final(driver, run, decision)


def _model_call_allowed(driver: Driver, run: Run, input_estimate: int) -> bool:
    """The checkpoint's decision on the model call, with a person's approval of it attached once;
    False (the run paused, or waits for a person) unless it is allowed."""
    store = driver.store
    run_id = run.run_id
    req = cp.CheckRequest(run=checks.run_context(run), counters=checks.counters(store, run),
                          model_call=cp.ModelCall(provider=run.provider, model=run.model,
                                                  max_tokens=MAX_TOKENS, input_tokens=input_estimate))
    approved = next((a for a in store.approvals(run_id, status="approved")
                     if a.tool == checks.MODEL_CALL_APPROVAL), None)
    if approved is not None:
        req.approval.CopyFrom(cp.Approval(decision_id=approved.decision_id, token=approved.token))
    resp = driver.checkpoint.check(req)
    checks.record_decision(store, run, "model_call", resp, model=run.model)
    if approved is not None:  # attached once: the checkpoint spent it or refused it
        store.settle_approval(approved.approval_id, "used")
    if resp.verdict == checks.HALT:
        pause_run(driver, run, resp.code, resp.reason, **checks.halted(resp))
        return False
    if resp.verdict == checks.APPROVAL:  # a person reads what the model is about to be asked
        approval_id = store.add_approval(
            run_id=run_id, call=0, decision_id=resp.decision_id, tool=checks.MODEL_CALL_APPROVAL,
            arguments={"provider": run.provider, "model": run.model, "max_tokens": MAX_TOKENS,
                       "input_tokens": input_estimate},
            code=resp.code, rule=resp.rule, reason=resp.reason, deadline=checks.deadline_of(resp))
        # Only from running: a person's pause (or a cancel) that landed during the check stands;
        # on resume the run comes back here and waits for this approval.
        store.transition(run_id, RUNNING, AWAITING_APPROVAL, resp.code, resp.reason)
        store.append_event(run_id, EventKind.APPROVAL_REQUESTED, approval_id=approval_id,
                           tool=checks.MODEL_CALL_APPROVAL, arguments={"model": run.model}, rule=resp.rule,
                           reason=resp.reason)
        return False
    if resp.verdict != checks.ALLOW:
        pause_run(driver, run, "model_call_denied", f"{resp.code}: {resp.reason}", decision_code=resp.code)
        return False
    return True
