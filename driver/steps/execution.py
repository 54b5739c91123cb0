"""An allowed call executed: its grant sent to the toolrunner (retried while the runner is busy,
never after the run ended), its output shown as it comes, its receipt kept and handed to the
model as data. A crash in between re-sends the same grant: the toolrunner answers a repeated
grant with the stored receipt, so nothing runs twice."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from driver import checks, context, learnings
from driver.errors import DependencyUnavailable, DriverError
from driver.output_events import OutputEvents
from driver.runs.model import TERMINAL, EventKind, Run, now
from driver.steps.ends import pause_run
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.structs import to_struct
from warden.toolrunner.v1 import toolrunner_pb2 as tr

if TYPE_CHECKING:
    from driver.loop import Driver


class RunEnded(Exception):
    """The run ended (a person cancelled it) before an allowed call was sent to the toolrunner."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def execute_when_free(driver: Driver, run: Run, call: dict[str, Any], req: tr.ExecuteRequest,
                      output: OutputEvents) -> tr.Receipt:
    """Execute, retrying `runner_busy` with exponential backoff (the runner refused before
    anything started, so resending the same grant is safe)."""
    for attempt in range(driver.runner_busy_retries + 1):
        # A cancel that landed while the call was decided (or between busy retries) already
        # stopped what ran for the run; a call sent after it would run for a cancelled run.
        current = driver.store.run(run.run_id)
        if current.status in TERMINAL:
            raise RunEnded(current.code or current.status)
        try:
            return driver.toolrunner.execute(req, output)
        except DriverError as exc:
            if exc.code != "runner_busy" or attempt == driver.runner_busy_retries or driver._stopping.is_set():
                raise
            delay = min(10.0, driver.runner_busy_backoff_seconds * (2 ** attempt))
            driver.store.append_event(run.run_id, EventKind.RUNNER_BUSY_RETRY, tool=call["tool"],
                                      decision_id=call["decision_id"], attempt=attempt + 1, delay=delay)
            time.sleep(delay)
    raise AssertionError("unreachable")


def execute(driver: Driver, run: Run, call: dict[str, Any], *, advice: str = "") -> None:
    store = driver.store
    if not advice and isinstance(call.get("result"), dict):  # stored with the grant (decisions.py)
        advice = str(call["result"].get("advice") or "")
    grant = cp.Grant.FromString(call["grant"])
    # A lapsed grant is sent all the same: the call may have run under it before this driver (or
    # the one that died) stored the receipt, and the toolrunner answers a lapsed grant whose call
    # ran with its stored receipt; one that never ran is refused `grant_expired`, and only then is
    # the call decided again (deciding first would give it a new decision id: it would run twice).
    lapsed = bool(grant.expires_at.seconds and grant.expires_at.seconds < now())
    arguments = json.loads(call["granted_arguments"]) if call.get("granted_arguments") else call["arguments"]
    req = tr.ExecuteRequest(run_id=run.run_id, agent=run.agent, agent_version=run.agent_version,
                            tool=call["tool"], arguments=to_struct(arguments), grant=grant)
    output = OutputEvents(store, run.run_id, call["tool"], call["decision_id"])
    try:
        receipt = execute_when_free(driver, run, call, req, output)
    except RunEnded as ended:  # never sent: the checkpoint's ALLOW stays on the call, nothing ran
        store.update_call(call["id"], status="done", code=ended.code, result={
            "is_error": True, "content": context.refusal_result(ended.code, "the run ended before this call was sent")})
        return
    except DependencyUnavailable:
        raise
    except DriverError as exc:
        if exc.code == "runner_busy":
            # Not the call's fault and nothing ran: no failure is counted, the call keeps its
            # grant (status `executing`) and is sent again when a person resumes the run.
            pause_run(driver, store.run(run.run_id), "runner_busy",
                      f"the toolrunner stayed busy through {driver.runner_busy_retries} retries: {exc.message}",
                      tool=call["tool"], decision_id=call["decision_id"])
            return
        if lapsed and exc.code == "grant_expired":  # it never ran: decide again rather than run unchecked
            store.update_call(call["id"], status="pending", grant=b"", granted_arguments="")
            return
        # the toolrunner refused (grant_*, image_not_allowed, policy_revision_mismatch, ...)
        checks.refuse(store, run, call, exc.code, exc.message, decision_id=call["decision_id"])
        store.append_event(run.run_id, EventKind.TOOL_REFUSED, tool=call["tool"], code=exc.code,
                           message=exc.message, decision_id=call["decision_id"])
        return
    finally:
        output.flush()  # what the tool wrote before any failure is still shown
    _keep_receipt(driver, run, call, receipt, advice)


def _keep_receipt(driver: Driver, run: Run, call: dict[str, Any], receipt: tr.Receipt, advice: str) -> None:
    store = driver.store
    ok = receipt.exit_code == 0 and not receipt.code and not receipt.timed_out
    store.add_receipt(run.run_id, receipt.decision_id or call["decision_id"], call["tool"],
                      receipt.exit_code, receipt.code, receipt.output,
                      json_format.MessageToDict(receipt, preserving_proto_field_name=True),
                      verifies=call["verifies"])
    content = advice + context.receipt_result(call["tool"], call["decision_id"], receipt.exit_code, receipt.code,
                                              receipt.output, receipt.truncated)
    store.update_call(call["id"], status="done", result={"is_error": not ok, "content": content})
    checks.count_outcome(store, run.run_id, ok)
    store.append_event(run.run_id, EventKind.TOOL_RECEIPT, tool=call["tool"], decision_id=call["decision_id"],
                       exit_code=receipt.exit_code, code=receipt.code, duration=receipt.duration_seconds,
                       truncated=receipt.truncated, masked=receipt.masked_count, replayed=receipt.replayed,
                       output=receipt.output[:2000],
                       **({"verifies": call["verifies"]} if call["verifies"] else {}))
    failed = learnings.task_failure(receipt.code, receipt.exit_code, receipt.timed_out)
    if failed and not call["verifies"]:  # a failed task becomes a proposed learning
        learnings.report(driver, run, cp.LEARNING_SOURCE_TASK_FAILED, failed,
                         f"{call['tool']} failed ({failed}): {receipt.output[-300:].strip()}",
                         tool=call["tool"], decision_id=call["decision_id"])
