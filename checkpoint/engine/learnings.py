"""The learnings step of a tool call (docs/learnings.md): advice, never authority.

Runs after the breakers, only for an agent's tool call that every earlier step let through (an
ALLOW, or a REQUIRE_APPROVAL still to come). Each active learning of the call's tenant (about
this agent, or about every agent of the tenant) whose match holds is added to the answer's
`learnings`. A `warning` changes nothing else: the call goes on. An `error` ends the decision
with DENY `learning_blocked`. So a learning can add a warning or turn an answer into a DENY,
never the other way round (tests/security/test_learnings_property.py).

A match that fails to evaluate (a missing argument, a wrong type) fails closed for what the
learning may do: an `error` learning denies (`policy_error`, naming it), a `warning` one is
skipped (a warning that cannot tell whether it applies adds nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpoint.engine.context import Call
from checkpoint.engine.outcome import DENY
from checkpoint.policy.learning_index import ERROR
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def check(call: Call, tool: Any, args: dict[str, Any], agent_map: Callable[[Call], dict[str, Any]],
          response: pb.CheckResponse) -> None:
    """Add the matching learnings to `response`; raise a DENY Stop for a blocking one.
    `agent_map(call)` gives the acting agent as a rule sees it (built only when a learning applies)."""
    index = call.policies.learnings
    agent = call.agent
    if agent is None or not index.by_tenant:
        return
    applicable = index.for_call(call.tenant.name, agent.name)
    if not applicable:
        return
    assert index.prepare is not None
    activation = index.prepare({"tool": {"name": tool.name, "access": tool.spec.access.value}, "args": args,
                                "agent": agent_map(call), "tenant": call.tenant.name})
    trace = call.trace
    blocking = None
    for learning in applicable:
        result = learning.program.evaluate(activation)
        if result.error is not None or not isinstance(result.value, bool):
            problem = result.error or f"returned {type(result.value).__name__}, not a bool"
            if learning.severity == ERROR:
                raise trace.stop(DENY, codes.POLICY_ERROR, f"learning:{learning.id}",
                                 f"learning {learning.id} could not be evaluated, so the call is refused: {problem}")
            trace.add(f"learning:{learning.id}", "error", detail=f"skipped (a warning): {problem}")
            continue
        if not result.value:
            trace.add(f"learning:{learning.id}", "pass")
            continue
        response.learnings.add(id=learning.id, severity=learning.severity, text=learning.text,
                               reviewed_by=learning.reviewed_by)
        if learning.severity == ERROR:
            blocking = blocking or learning
        else:
            trace.add(f"learning:{learning.id}", "warning", detail=learning.text[:300])
    if blocking is not None:
        who = f", reviewed by {blocking.reviewed_by}" if blocking.reviewed_by else ""
        raise trace.stop(DENY, codes.LEARNING_BLOCKED, f"learning:{blocking.id}",
                         f"learning {blocking.id}{who} blocks this call: {blocking.text[:500]}")
