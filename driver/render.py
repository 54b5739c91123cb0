"""Readable one-line renderings of run events and runs for the CLI (turns, proposals, verdicts,
tool receipts, breaker trips)."""

from __future__ import annotations

import json
import time
from typing import Any


def _args(a: Any) -> str:
    text = json.dumps(a, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 90 else text[:87] + "..."


def _ints(v: Any) -> Any:
    # events travel as protobuf Structs, where every number is a double
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {k: _ints(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_ints(x) for x in v]
    return v


def event_line(kind: str, d: dict[str, Any], seq: int = 0) -> str:
    d = _ints(d)
    p = f"[{seq:>4}] " if seq else ""
    if kind == "run_started":
        child = f", child of {d['parent_run_id']} at depth {d.get('depth')}" if d.get("parent_run_id") else ""
        return (f"{p}run started: agent {d.get('agent')}@{str(d.get('agent_version'))[:12]} for {d.get('owner')} "
                f"({d.get('mode')}, model {d.get('model')}{child}); tools: {', '.join(d.get('tools') or [])}")
    if kind == "decision":
        what = d.get("action")
        if what == "tool_call":
            what = f"{d.get('tool')} {_args(d.get('arguments') or {})}"
            if d.get("verifies"):
                what += f" [the driver's check of criterion {d['verifies']}]"
            elif d.get("plan_step"):
                what += f" [step {d['plan_step']}]"
            elif d.get("counts_as_drift"):
                what += " [drift: serves no plan step]"
        elif what == "plan":
            what = "plan " + ", ".join(f"{s['id']}:{s['tool']}" for s in d.get("steps") or [])
        elif what == "proposal":
            what = f"proposal to change {d.get('agent')}" + (
                f" (version {str(d['version'])[:12]} waits for a tenant admin)" if d.get("version") else "")
        elif what == "delegation":
            what = f"delegate to {d.get('agent')}"
        elif what == "learning":
            what = f"the agent's proposed learning {d.get('learning') or ''}".rstrip()
        if d.get("learnings"):  # the answer carried learnings (docs/learnings.md)
            what = f"{what} [learnings: {', '.join(d['learnings'])}]"
        verdict = d.get("verdict")
        mark = {"ALLOW": "+", "DENY": "x", "REQUIRE_APPROVAL": "?", "HALT": "!"}.get(str(verdict), " ")
        reason = "" if verdict == "ALLOW" else f" ({d.get('reason')})"
        return f"{p}  {mark} checkpoint {verdict} {d.get('code')}: {what}{reason}"
    if kind == "model_reply":
        prop = d.get("proposal") or {}
        k = d.get("kind")
        if k == "tool_calls":
            body = "; ".join(f"{c['tool']} {_args(c['arguments'])}" for c in prop.get("calls", []))
        elif k == "final":
            body = "final: " + ", ".join(f"{o['criterion']}={'met' if o['met'] else 'unmet'}"
                                         for o in prop.get("outcomes", []))
        elif k == "handoff":
            body = f"handoff ({prop.get('code')}): {prop.get('reason')}"
        elif k == "rejection":
            body = f"rejected at the boundary ({prop.get('code')}): {prop.get('detail')}"
        else:
            body = "no action (idle)"
        return (f"{p}turn {d.get('turn')}: model proposes {body}  "
                f"[{d.get('input_tokens')}+{d.get('output_tokens')} tokens]")
    if kind == "tool_receipt":
        out = (d.get("output") or "").strip().replace("\n", " ")
        out = out if len(out) <= 100 else out[:97] + "..."
        return (f"{p}  = receipt {d.get('tool')}: exit {d.get('exit_code')}{' ' + d['code'] if d.get('code') else ''}"
                f" in {float(d.get('duration') or 0):.2f}s{' (replayed)' if d.get('replayed') else ''}: {out}")
    if kind == "approval_requested":
        arguments = d.get("arguments") or {}
        steps = arguments.get("steps") if d.get("tool") == "propose_plan" else None
        if isinstance(steps, list):  # a plan: shown step by step, for the person to read before the run goes on
            shown = "the plan:" + "".join(
                f"\n{p}        {i}. {s.get('id')}: {s.get('tool')}" + (f" {_args(s['arguments'])}" if s.get("arguments") else "")
                + (f" ({s['description']})" if s.get("description") else "")
                for i, s in enumerate(steps, 1) if isinstance(s, dict))
        else:
            shown = f"{d.get('tool')} {_args(arguments)}"
        return (f"{p}  ? waiting for a person: approval {d.get('approval_id')} for {shown} ({d.get('reason')})\n"
                f"        approve: warden approve {d.get('approval_id')}   reject: warden reject {d.get('approval_id')}")
    if kind == "approval_wait":
        due = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(d.get("deadline") or 0)))
        return f"{p}  waiting for approval {d.get('approval_id')} until {due}, then it is refused"
    if kind == "approval_decided":
        return f"{p}  {d.get('person')} {d.get('decision')} {d.get('tool')}{': ' + d['note'] if d.get('note') else ''}"
    if kind == "run_paused":
        return f"{p}|| run paused ({d.get('code')}): {d.get('reason')}"
    if kind == "run_resumed":
        raised = d.get("raised") or {}
        return (f"{p}> run resumed by {d.get('person')}"
                + (f" with its parent run {d['parent_run_id']}" if d.get("parent_run_id") else "")
                + (f", ceilings raised {raised}" if raised else "") + (f": {d.get('reply')}" if d.get("reply") else ""))
    if kind == "verification_started":
        rows = [f"{p}  verifying the final report: criterion {c.get('criterion')} by the driver's own call "
                 f"{c.get('tool')} {_args(c.get('arguments') or {})}"
                 + "".join(f"; {arg} from this run's receipt {dec}" for arg, dec in (c.get("from_receipts") or {}).items())
                 for c in d.get("calls") or []]
        rows += [f"{p}  cannot verify criterion {cid}: {why}" for cid, why in (d.get("unresolved") or {}).items()]
        return "\n".join(rows)
    if kind == "outcome_verified":
        return f"{p}  outcome: met {d.get('met')}; missing {d.get('missing') or 'nothing'}"
    if kind in ("run_succeeded", "run_failed", "run_cancelled"):
        return f"{p}== {kind.removeprefix('run_')}: {d.get('code')}: {d.get('reason')}"
    if kind == "provider_refused":
        return f"{p}  ! provider refused ({d.get('kind')}): {d.get('message')}"
    if kind == "reply_rejected":
        return f"{p}  x reply rejected ({d.get('code')}): {d.get('detail')}"
    if kind == "nudged":
        return f"{p}  nudge: the turn started nothing and reported nothing"
    if kind == "tool_output":
        text = str(d.get("text") or "").rstrip("\n")
        lines = "\n".join(f"{p}    | {line}" for line in text.split("\n"))
        return lines + (f"\n{p}    | [live output capped; the receipt keeps head and tail]" if d.get("capped") else "")
    if kind == "child_started":
        return (f"{p}  > child run {d.get('child_run_id')} started: agent {d.get('agent')}@"
                f"{str(d.get('agent_version'))[:12]}; tools: {', '.join(d.get('tools') or []) or 'none'}\n"
                f"        watch it: warden watch {d.get('child_run_id')}")
    if kind == "child_ended":
        return f"{p}  < child run {d.get('child_run_id')} ({d.get('agent')}) {d.get('status')}: {d.get('reason')}"
    if kind == "call_refused":
        return f"{p}  x {d.get('tool')} refused: {d.get('code')}"
    if kind == "lessons_loaded":
        return (f"{p}  lessons in the model's context, as data from the catalog: "
                + ", ".join(f"{x.get('id')} ({x.get('severity')}, reviewed by {x.get('reviewed_by')})"
                            for x in d.get("learnings") or []))
    if kind == "learning_proposed":
        return f"{p}  learning {d.get('learning')} proposed ({d.get('source')} {d.get('code')}; seen {d.get('occurrences')}x)"
    return f"{p}{kind} {_args(d)}"


def run_line(r: Any) -> str:
    from warden.driver.v1 import driver_pb2 as pb

    status = pb.RunStatus.Name(r.status).removeprefix("RUN_STATUS_").lower()
    parent = f"  parent {r.parent_run_id}" if r.parent_run_id else ""
    return (f"{r.run_id}  {r.agent}@{r.agent_version[:12]}  {status:<17} {r.code:<24} "
            f"turns {r.counters.total_turns:<3} tokens {r.total_tokens:<7} owner {r.owner}{parent}{holder_text(r)}")


def holder_text(r: Any) -> str:
    """Who holds a durable run (PostgreSQL store): `  held by <driver>`, and whether it is dead."""
    if not r.lease_holder:
        return ""
    if r.lease_holder_dead:
        return f"  held by {r.lease_holder} (dead: being taken over)"
    until = ""
    if r.HasField("lease_expires_at"):
        until = time.strftime(" (lease to %H:%M:%SZ)", time.gmtime(r.lease_expires_at.ToSeconds()))
    return f"  held by {r.lease_holder}{until}"
