"""The model says it is done. Its final report is kept on the run while the driver verifies it:
for each `call_ok` criterion the driver adds its own call (arguments from the goal and this run's
receipts, never from the model's text), decided and run like the model's; then `conclude` decides
the criteria: all met, the run succeeds; else it pauses for a person."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from driver.boundary import Final, Outcome
from driver.errors import RunStateError
from driver.runs.model import SUCCEEDED, EventKind, Run
from driver.steps.ends import finish_run, pause_run
from driver.verify import Unresolved, Verification, call_arguments, verify_outcomes
from warden import canonical

if TYPE_CHECKING:
    from driver.loop import Driver


def verify_final(driver: Driver, run: Run, decision: Final) -> None:
    """Keep the model's report, and for each call_ok criterion add the driver's own call. The
    calls go through the checkpoint and the toolrunner like the model's; `conclude` then decides."""
    store = driver.store
    run_id = run.run_id
    work = store.receipts(run_id, work_only=True)
    unresolved: dict[str, str] = {}
    calls: list[dict[str, Any]] = []
    for c in store.goal(run_id)["criteria"]:
        check = c.get("check") or {}
        if check.get("kind") != "call_ok":
            continue
        try:
            arguments, sources = call_arguments(check, work)
        except Unresolved as exc:
            unresolved[c["id"]] = str(exc)
            continue
        calls.append({"call_id": f"verify-{c['id']}", "tool": check["tool"], "arguments": arguments,
                      "args_sha": canonical.sha256_hex(arguments), "plan_step": "", "verifies": c["id"],
                      "sources": sources})
    final = {"turn": run.turn, "summary": decision.summary, "unresolved": unresolved,
             "outcomes": [o.model_dump() for o in decision.outcomes]}
    store.begin_final(run_id, run.turn, final, [{k: v for k, v in x.items() if k != "sources"} for x in calls])
    if calls or unresolved:
        store.append_event(run_id, EventKind.VERIFICATION_STARTED, unresolved=unresolved, calls=[
            {"criterion": x["verifies"], "tool": x["tool"], "arguments": x["arguments"],
             "from_receipts": x["sources"]} for x in calls])


def conclude(driver: Driver, run: Run) -> None:
    """Decide the model's final report: checks on the run's receipts and on the driver's own
    verification calls, evidence for the rest. All met: succeeded; else the run pauses."""
    store = driver.store
    run_id, final = run.run_id, run.final
    if final is None:  # the loop concludes only a run with a final report under way
        raise RunStateError(f"run {run_id} has no final report to conclude")
    goal = store.goal(run_id)
    verifications = {cid: Verification(tool="", arguments={}, unresolved=why)
                     for cid, why in final["unresolved"].items()}
    for call in store.calls(run_id, final["turn"]):
        if call["verifies"]:
            receipt = store.receipt(call["decision_id"]) if call["decision_id"] else None
            refused = "" if receipt else f"{call['verdict'] or 'not decided'} {call['code']}".strip()
            verifications[call["verifies"]] = Verification(call["tool"], call["arguments"], receipt, refused)
    outcomes = [Outcome.model_validate(o) for o in final["outcomes"]]
    met, missing = verify_outcomes(goal, outcomes, store.receipts(run_id, work_only=True), verifications)
    store.append_event(run_id, EventKind.OUTCOME_VERIFIED, met=met, missing=missing, summary=final["summary"],
                       verified=[{"criterion": cid, "tool": v.tool, "arguments": v.arguments,
                                  "decision_id": v.receipt["decision_id"] if v.receipt else None}
                                 for cid, v in verifications.items() if not v.unresolved])
    if missing:
        store.update_run(run_id, missing=missing)
        pause_run(driver, run, "criteria_unmet", "not every criterion is met: " + "; ".join(missing),
                  missing=missing)
    else:
        store.update_run(run_id, missing=[])
        finish_run(driver, run, SUCCEEDED, "succeeded", final["summary"] or "every criterion is met", met=met)
    store.update_run(run_id, final=None)  # after the outcome: a crash before it decides again
