"""Done means verified: each criterion is met by a check code runs, or by evidence.

- A criterion with a `check` is decided by the run's receipts, never by what the model says:
  `receipt_ok` needs a receipt (of `tool`, when given) with exit code 0, no error code, and
  `output_contains` in its output when given.
- A criterion without a check is met when the model reports it met and gives evidence.
Returns (met ids, missing descriptions); the run succeeds only when nothing is missing.
"""

from __future__ import annotations

from typing import Any

from driver.boundary import Outcome


def _receipt_ok(check: dict[str, Any], receipts: list[dict[str, Any]]) -> bool:
    for r in receipts:
        if check.get("tool") and r["tool"] != check["tool"]:
            continue
        if r["exit_code"] != 0 or r["code"]:
            continue
        if check.get("output_contains") and check["output_contains"] not in (r["output"] or ""):
            continue
        return True
    return False


def verify_outcomes(goal: dict[str, Any], outcomes: list[Outcome],
                    receipts: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    reported = {o.criterion: o for o in outcomes}
    met: list[str] = []
    missing: list[str] = []
    for c in goal["criteria"]:
        check = c.get("check")
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
