"""`warden agents stats AGENT`: an agent's versions side by side, from the checkpoint's figures
(AgentStats, computed from the decision log; docs/catalog.md, "Statistics"). One row per version,
oldest first, so "is the new version better" is a comparison of two rows."""

from __future__ import annotations

from typing import Any

COUNTS = (("RUNS", "runs"), ("SUCCEEDED", "succeeded"), ("PAUSED", "paused"), ("FAILED", "failed"),
          ("CANCELLED", "cancelled"), ("OPEN", "open"))


def stats_document(answer: Any) -> dict[str, Any]:
    """The answer as plain JSON values, with the same names as the table (for tools)."""
    return {
        "agent": answer.agent,
        "tenant": answer.tenant,
        "live_version": answer.live_version,
        "log_seq": answer.log_seq,
        "versions": [{
            "version": v.version, "status": v.status, "live": v.live,
            **{name: getattr(v, name) for _, name in COUNTS},
            "pauses": v.pauses,
            "breaker_trips": dict(sorted(v.breaker_trips.items())),
            "tokens": v.tokens, "runs_with_tokens": v.runs_with_tokens,
            "average_tokens": round(v.average_tokens, 1),
        } for v in answer.versions],
    }


def render_stats(answer: Any) -> str:
    breakers = sorted({name for v in answer.versions for name in v.breaker_trips})
    header = ["", "VERSION", "STATUS", *(title for title, _ in COUNTS),
              *(f"breaker_{name}" for name in breakers), "AVG TOKENS"]
    rows = [header]
    for v in answer.versions:
        rows.append(["*" if v.live else "", v.version, v.status or "(not in catalog)",
                     *(str(getattr(v, name)) for _, name in COUNTS),
                     *(str(v.breaker_trips.get(name, 0)) for name in breakers),
                     f"{v.average_tokens:,.0f}" if v.runs_with_tokens else "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"{answer.agent} (tenant {answer.tenant}): {len(answer.versions)} version(s), from the decision log "
             f"up to record {answer.log_seq}"]
    for row in rows:
        cells = [cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    lines.append("* live.  PAUSED: runs that paused for a person at least once.  OPEN: not ended yet (running, "
                 "waiting, or paused now).")
    lines.append("breaker_*: trips.  AVG TOKENS: per run, as its last recorded end reported.")
    return "\n".join(lines)
