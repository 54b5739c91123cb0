"""In-process decision time for the shipped policies, beside cedarpy on an equivalent Cedar policy.

The request: the recon agent creates a task from a template against a lab host, on a lab node,
with a pinned image: allowlist, access, three scope dimensions, off-limits subjects, two CEL
rules for the tool and all eleven breakers. The Cedar policy expresses the same checks; Cedar
has no breakers or versions, so its counters are context attributes compared in `when` clauses.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CEDAR_POLICY = """
permit (principal == Agent::"recon", action in [Action::"create_task_from_template", Action::"get_task",
        Action::"list_templates"], resource)
when {
  (resource.host like "*.lab.example.com" || resource.host like "10.20.0.*") &&
  (!(context has node) || context.node like "lab-node-*") &&
  (!(context has image) || context.image like "recon/nmap:*" || context.image like "recon/httpx:*") &&
  ["read", "write"].contains(context.access) &&
  context.turn_tool_calls < 4 && context.stretch_turns < 30 && context.total_turns < 300 &&
  context.stretch_tokens < 200000 && context.wall_clock_seconds < 3600 && context.identical_calls < 3 &&
  context.consecutive_failures < 3 && context.drift < 3 && context.tree_tokens < 1000000 &&
  context.owner_spend_today_cents < 5000 && context.tenant_spend_today_cents < 50000 &&
  context.provider_refusals < 2
};
forbid (principal, action, resource) when { resource.host like "*.gov" };
forbid (principal, action, resource) when { resource.host == "payments.lab.example.com" };
forbid (principal, action == Action::"create_task_from_template", resource)
when { context.mode == "background" && context.template like "intrusive-*" };
forbid (principal, action == Action::"create_task_from_template", resource)
when { resource.host like "*.0/24" };
"""

COUNTERS = {
    "turn_tool_calls": 1, "stretch_turns": 3, "total_turns": 3, "stretch_tokens": 1200,
    "wall_clock_seconds": 12, "identical_calls": 0, "consecutive_failures": 0, "drift": 0,
    "tree_tokens": 1200, "owner_spend_today_cents": 40, "tenant_spend_today_cents": 900,
    "provider_refusals": 0,
}
ARGS = {"template": "web-basic", "target": "www.lab.example.com", "node": "lab-node-1", "image": "recon/nmap:7.94"}


def _median_us(fn, rounds: int = 25, per_round: int = 400) -> tuple[float, float, float]:
    for _ in range(per_round):  # warm up
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(per_round):
            fn()
        samples.append((time.perf_counter() - start) / per_round * 1e6)
    samples.sort()
    return samples[0], statistics.median(samples), samples[-1]


def warden_decision():
    from checkpoint.engine import decide
    from checkpoint.policy import load_policy_dir
    from warden.checkpoint.v1 import checkpoint_pb2 as pb

    policies = load_policy_dir(ROOT / "policies")
    request = pb.CheckRequest(
        run=pb.RunContext(
            run_id="run-1", mode=pb.RUN_MODE_INTERACTIVE,
            actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                         pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon", agent_version=policies.agents["recon"].version)],
        ),
        tool_call=pb.ToolCall(tool="create_task_from_template"),
        counters=pb.Counters(turn_tool_calls=1, stretch_turns=3, total_turns=3, stretch_tokens=1200,
                             wall_clock_seconds=12, tree_tokens=1200, owner_spend_today_usd=0.4,
                             tenant_spend_today_usd=9),
    )
    request.tool_call.arguments.update(ARGS)
    assert decide(policies, request).verdict == pb.VERDICT_ALLOW
    return lambda: decide(policies, request)


def cedar_decision():
    import cedarpy

    policies = cedarpy.PolicySet.from_str(CEDAR_POLICY)
    entities = cedarpy.Entities.from_json_str(
        '[{"uid": {"type": "Subject", "id": "www.lab.example.com"}, "attrs": {"host": "www.lab.example.com"}, "parents": []},'
        ' {"uid": {"type": "Agent", "id": "recon"}, "attrs": {}, "parents": []}]'
    )
    request = {
        "principal": 'Agent::"recon"',
        "action": 'Action::"create_task_from_template"',
        "resource": 'Subject::"www.lab.example.com"',
        "context": {**COUNTERS, "access": "write", "mode": "interactive", "template": ARGS["template"],
                    "node": ARGS["node"], "image": ARGS["image"]},
    }
    result = cedarpy.is_authorized(request, policies, entities)
    assert result.decision == cedarpy.Decision.Allow, result.diagnostics
    return lambda: cedarpy.is_authorized(request, policies, entities)


def main(argv: list[str] | None = None) -> None:  # no options; argv for the runner's sake
    rows = [("warden decide() [native CEL]", warden_decision())]
    try:
        rows.append(("cedarpy is_authorized()", cedar_decision()))
    except ImportError:
        print("cedarpy is not installed (pip install cedarpy); skipping the comparison")
    print(f"{'in-process decision, recon create_task_from_template':<48} {'min':>8} {'median':>8} {'max':>8}")
    for label, fn in rows:
        lo, med, hi = _median_us(fn)
        print(f"{label:<48} {lo:>7.1f}u {med:>7.1f}u {hi:>7.1f}u")
    print("target: warden median <= 50 us and below cedarpy's")


if __name__ == "__main__":
    main()
