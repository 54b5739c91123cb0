"""Step 6b: limits across runs (the Instance's `limits`, docs/policies.md "Limits").

Pure like the rest of the engine: the counts were read from the shared store before decide() ran
(checkpoint/policy/limits.py, `LimitUsage`). A call whose amount would take a count past its max is
refused here; one that fits is counted by the service after the ALLOW, conditionally, so two
replicas that both read max-1 cannot both count (checkpoint/server/limit_counts.py).
"""

from __future__ import annotations

from checkpoint.engine.context import Call
from checkpoint.engine.outcome import DENY, HALT
from warden.checkpoint.v1 import checkpoint_pb2 as pb

VERDICTS: dict[str, pb.Verdict] = {"deny": DENY, "halt": HALT}


def refusal(verdict: str) -> pb.Verdict:
    """The verdict a limit answers with once reached (`verdict:` of the limit)."""
    return VERDICTS[verdict]


def check(call: Call) -> None:
    """Refuse when a limit that counts this call has no room left for it."""
    for use in call.limits.uses:
        if use.exceeded:
            limit = use.limit
            left = limit.shown(use.remaining)
            raise call.trace.stop(
                refusal(limit.spec.verdict), limit.code, f"limit:{limit.name}",
                f"limit {use.described()} is reached: this call needs {limit.shown(use.amount)}, "
                f"{left} left until the window ends",
            )
    if call.limits.uses:
        call.trace.add("limits", "pass")

