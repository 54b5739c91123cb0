"""Done means verified: each criterion is met by a check code runs, or by evidence.

- A criterion with a `check` is decided by the run's receipts, never by what the model says:
  `receipt_ok` needs a receipt (of `tool`, when given) with exit code 0, no error code, and
  `output_contains` in its output when given.
- `call_ok` is decided by a call the driver makes itself once the model reports final: its
  arguments come from the goal and from this run's own receipts (`call_arguments`), the call is
  decided by the checkpoint and run by the toolrunner like any (driver/steps/final.py), and its receipt
  must pass the same test as `receipt_ok`'s.
- A criterion without a check is met when the model reports it met and gives evidence.
`verify_outcomes` returns (met ids, missing descriptions); the run succeeds only when nothing is
missing.

Receipts are the toolrunner's, stored by the driver for this run alone; the model's text (its
reply, its evidence, its arguments) is never read here, so a model that writes a task id or a
status cannot make a check pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from driver.boundary import Outcome


class Unresolved(Exception):
    """A value `arguments_from` names is not in this run's receipts: the check cannot run."""


@dataclass(frozen=True)
class Verification:
    """What became of the driver's own call for a `call_ok` criterion."""

    tool: str
    arguments: dict[str, Any]
    receipt: dict[str, Any] | None = None  # the stored receipt, when the call ran
    refused: str = ""  # else why it did not run: the checkpoint's or toolrunner's code and reason
    unresolved: str = ""  # or why it was never made: a value it needs is not in the run's receipts


def ok(receipt: dict[str, Any]) -> bool:
    return receipt["exit_code"] == 0 and not receipt["code"]


def _receipt_ok(check: dict[str, Any], receipts: list[dict[str, Any]]) -> bool:
    for r in receipts:
        if check.get("tool") and r["tool"] != check["tool"]:
            continue
        if not ok(r):
            continue
        if check.get("output_contains") and check["output_contains"] not in (r["output"] or ""):
            continue
        return True
    return False


def call_arguments(check: dict[str, Any], receipts: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The arguments of a `call_ok` check's call: those written in the goal, plus each value
    `arguments_from` names, read from the JSON output of this run's last successful receipt of
    that tool. Returns (arguments, argument -> decision id of the receipt it came from); raises
    Unresolved when the run has no such receipt or the receipt has no such value."""
    arguments = dict(check.get("arguments") or {})
    sources: dict[str, str] = {}
    for name, ref in sorted((check.get("arguments_from") or {}).items()):
        tool, path = ref["receipt"], ref["field"]
        found = [r for r in receipts if r["tool"] == tool and ok(r)]
        if not found:
            raise Unresolved(f"argument {name} is taken from this run's receipt of {tool}, and the run has "
                             f"no successful receipt of {tool}")
        receipt = found[-1]  # receipts come oldest first: the run's latest call of that tool
        try:
            value: Any = json.loads(receipt["output"] or "")
        except ValueError:
            raise Unresolved(f"argument {name}: the output of this run's {tool} receipt "
                             f"({receipt['decision_id']}) is not JSON") from None
        for key in path.split("."):
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                raise Unresolved(f"argument {name}: this run's {tool} receipt ({receipt['decision_id']}) "
                                 f"has no {path} in its output")
        arguments[name] = value
        sources[name] = receipt["decision_id"]
    return arguments, sources


def _call_missing(check: dict[str, Any], v: Verification | None) -> str:
    """Why a `call_ok` criterion is not met; empty when it is."""
    if v is None:
        return f"no verification call of {check['tool']} was made for the final report"
    if v.unresolved:
        return f"cannot verify with {check['tool']}: {v.unresolved}"
    call = f"{v.tool} {json.dumps(v.arguments, sort_keys=True)}"
    if v.receipt is None:
        return f"the verification call {call} did not run: {v.refused or 'no receipt'}"
    if not ok(v.receipt):
        return (f"the verification call {call} failed: exit {v.receipt['exit_code']}"
                + (f" ({v.receipt['code']})" if v.receipt["code"] else ""))
    if check.get("output_contains") and check["output_contains"] not in (v.receipt["output"] or ""):
        return f"the output of the verification call {call} does not contain {check['output_contains']!r}"
    return ""


def verify_outcomes(goal: dict[str, Any], outcomes: list[Outcome], receipts: list[dict[str, Any]],
                    verifications: dict[str, Verification] | None = None) -> tuple[list[str], list[str]]:
    """`receipts`: the run's receipts of its own work (not of verification calls); `verifications`:
    criterion id -> the driver's call for it, for every `call_ok` criterion."""
    reported = {o.criterion: o for o in outcomes}
    verifications = verifications or {}
    met: list[str] = []
    missing: list[str] = []
    for c in goal["criteria"]:
        check = c.get("check")
        if check and check.get("kind") == "call_ok":
            why = _call_missing(check, verifications.get(c["id"]))
            if why:
                missing.append(f"{c['id']}: {why}")
            else:
                met.append(c["id"])
            continue
        if check:
            if _receipt_ok(check, receipts):
                met.append(c["id"])
            else:
                what = f"a successful receipt of {check['tool']}" if check.get("tool") else "a successful receipt"
                if check.get("output_contains"):
                    what += f" whose output contains {check['output_contains']!r}"
                missing.append(f"{c['id']}: no {what}")
            continue
        o = reported.get(c["id"])
        if o is None:
            missing.append(f"{c['id']}: no outcome reported")
        elif not o.met:
            missing.append(f"{c['id']}: reported not met")
        elif not o.evidence.strip():
            missing.append(f"{c['id']}: reported met without evidence")
        else:
            met.append(c["id"])
    return met, missing
