"""Property: a learning is advice, never authority (docs/learnings.md).

Over the shipped policies, Hypothesis draws a set of active learnings (any tenant, any agent or
every agent, warning or error, matches that hold, fail, or cannot be evaluated) and a request
(a person or a chain of agents, any tool with good or bad arguments, counters that trip
breakers or not, an approval at hand or not, model calls, delegations and plans too). The same
request is decided with and without the learnings, and:

- nothing a learning does is ever less strict: the verdict ranks ALLOW < REQUIRE_APPROVAL <
  DENY/HALT, and the advised one is never below the plain one;
- a DENY or HALT stays exactly what it was (same code, rule, reason): no learning speaks there;
- otherwise the answer is the same but for the learnings it lists and the reason's note of them,
  or it is a DENY by a learning (`learning_blocked`, or `policy_error` of an error learning whose
  match could not be evaluated). Child authority, budgets, versions: the same, never wider;
- only tool calls of agents ever carry a learning, and only learnings of the call's tenant about
  the acting agent (or about every agent of the tenant).
"""

from __future__ import annotations

import functools

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from checkpoint.engine import decide
from checkpoint.policy import PolicySet
from checkpoint.policy.learning_index import build_index
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .policies import shipped

RANK = {pb.VERDICT_ALLOW: 0, pb.VERDICT_REQUIRE_APPROVAL: 1, pb.VERDICT_DENY: 2, pb.VERDICT_HALT: 2}
AGENTS = ("recon", "triage", "ops", "refunds", "idle")
CHAINS = ((), ("recon",), ("triage",), ("ops",), ("refunds",), ("idle",), ("recon", "triage"))
AGENT_CHAINS = CHAINS[1:]
MATCHES = (
    "true", "false",
    'tool.name == "create_task_from_template"', 'tool.name == "list_templates"', 'tool.name == "run_shell"',
    'tool.access == "write"', '"read" in agent.access', 'agent.name == "recon"', 'tenant == "acme"',
    'args.target.endsWith(".lab.example.com")',  # an error where there is no target
    'has(args.target) && args.target.contains("/")', 'has(args.customer) && args.customer == "customer:a"',
    "args.template > 1",  # a type error at run time (a string against an int)
    "1 / 0 == 1",  # never evaluates
)
ARGUMENTS = {
    "create_task_from_template": [
        {"template": "web-basic", "target": "web.lab.example.com"},
        {"template": "web-basic", "target": "10.20.0.0/24"},
        {"template": "intrusive-full", "target": "db.lab.example.com"},
        {"template": "web-basic", "target": "payments.lab.example.com"},
        {"template": "web-basic", "target": "example.org"},
        {"template": "BAD TEMPLATE", "target": "x"},
        {"template": "web-basic", "target": "web.lab.example.com", "node": "lab-node-1"},
        {"template": "web-basic", "target": "web.lab.example.com", "node": "prod-node-1"},
    ],
    "get_task": [{"task_id": "task-1"}, {"task_id": "nope"}, {}],
    "list_templates": [{}, {"extra": 1}],
    "cancel_task": [{"task_id": "task-1"}],
    "lookup_order": [{"order_id": "ord-1", "customer": "customer:a"}, {"order_id": "ord-1", "customer": "x"}],
    "read_invoice": [{"invoice_id": "inv-1", "customer": "customer:a"}],
    "propose_refund": [
        {"invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:a", "amount_usd": 20.0, "reason": "dup"},
        {"invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:a", "amount_usd": 900.0, "reason": "dup"},
    ],
    "run_shell": [{"program": "echo", "arg": "hi"}, {"program": "rm"}],
    "update_agent": [{"agent": "recon"}],
    "no_such_tool": [{}],
}


@functools.cache
def policies() -> PolicySet:
    return shipped()


@st.composite
def learnings(draw: st.DrawFn) -> list[dict]:
    rows = []
    for i in range(draw(st.integers(0, 6))):
        rows.append({
            "id": f"lrn-{i:02d}",
            "tenant": draw(st.sampled_from(["acme", "acme", "acme", "default", "other"])),
            "agent": draw(st.sampled_from(["", "", *AGENTS, "nobody"])),
            "severity": draw(st.sampled_from(["warning", "error"])),
            "text": f"lesson {i}",
            "reviewed_by": "carol",
            "match": draw(st.sampled_from(MATCHES)),
        })
    return rows


@st.composite
def requests(draw: st.DrawFn) -> pb.CheckRequest:
    p = policies()
    chain = draw(st.sampled_from(CHAINS + AGENT_CHAINS * 3))  # mostly agents: learnings act on their calls
    run = pb.RunContext(run_id="run-1", root_run_id="run-0" if len(chain) > 1 else "run-1",
                        mode=draw(st.sampled_from([pb.RUN_MODE_INTERACTIVE, pb.RUN_MODE_BACKGROUND])),
                        has_plan=draw(st.booleans()))
    run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="alice")
    for i, name in enumerate(chain):
        run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=name, agent_version=p.agents[name].version, run_id=f"run-{i}")
    counters = pb.Counters()
    if draw(st.integers(0, 3)) == 0:  # now and then, counters at or past a breaker's ceiling
        counters = pb.Counters(
            turn_tool_calls=draw(st.integers(0, 9)), identical_calls=draw(st.integers(0, 4)),
            consecutive_failures=draw(st.integers(0, 4)), stretch_turns=draw(st.sampled_from([0, 1, 59, 60])),
            stretch_tokens=draw(st.sampled_from([0, 1000, 10**6])), drift=draw(st.integers(0, 4)),
            children=draw(st.integers(0, 4)), tree_runs=draw(st.integers(0, 12)))
    request = pb.CheckRequest(run=run, counters=counters)
    action = draw(st.sampled_from(["tool_call"] * 6 + ["model_call", "delegation", "plan"]))
    if action == "tool_call":
        own = sorted(p.agents[chain[-1]].tools & set(ARGUMENTS)) if chain else []
        # mostly a tool the agent holds with good arguments: the answers a learning may speak in
        tool = draw(st.sampled_from(own)) if own and draw(st.integers(0, 3)) else draw(st.sampled_from(sorted(ARGUMENTS)))
        request.tool_call.tool = tool
        cases = ARGUMENTS[tool]
        request.tool_call.arguments.update(cases[0] if draw(st.booleans()) else draw(st.sampled_from(cases)))
        request.tool_call.plan_step = draw(st.sampled_from(["", "s1"]))
    elif action == "model_call":
        request.model_call.CopyFrom(pb.ModelCall(provider="scripted", model=draw(st.sampled_from(["sonnet", "opus"])),
                                                 max_tokens=2048, input_tokens=100))
    elif action == "delegation":
        request.delegation.agent = draw(st.sampled_from([*AGENTS, "nobody"]))
    else:
        tools = draw(st.lists(st.sampled_from(sorted(ARGUMENTS)), min_size=1, max_size=3))
        request.plan.steps.extend(pb.PlanStep(id=f"s{i}", tool=t) for i, t in enumerate(tools))
    return request


def _decide(p: PolicySet, request: pb.CheckRequest, approved: bool) -> pb.CheckResponse:
    rules = frozenset({"wide-scans-need-approval", "refund-writes-need-approval"}) if approved else frozenset()
    copy = pb.CheckRequest()
    copy.CopyFrom(request)
    try:
        return decide(p, copy, approver="bob" if approved else "", approved_rules=rules)
    except Exception as exc:  # InvalidRequest: the same with or without learnings (checked below)
        return pb.CheckResponse(code=f"raised:{type(exc).__name__}:{exc}")


def _without_advice(response: pb.CheckResponse) -> pb.CheckResponse:
    out = pb.CheckResponse()
    out.CopyFrom(response)
    out.ClearField("learnings")
    out.reason = out.reason.split("; warned by learning")[0]
    return out


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=learnings(), request=requests(), approved=st.booleans())
def test_no_learning_allows_what_was_refused_or_widens_anything(rows, request, approved):
    plain = policies()
    advised = plain.with_learnings(build_index(rows, plain.cel_engine))
    before = _decide(plain, request, approved)
    after = _decide(advised, request, approved)
    assert RANK.get(after.verdict, 2) >= RANK.get(before.verdict, 2), (before, after)
    if before.verdict in (pb.VERDICT_DENY, pb.VERDICT_HALT) or before.code.startswith("raised:"):
        event(f"refused {before.code.split(':')[0]}")
        assert after == before  # a refusal stays exactly what it was
        return
    by_learning = after.verdict == pb.VERDICT_DENY and after.rule.startswith("learning:")
    event(f"{pb.Verdict.Name(before.verdict)} -> {after.code}" + (" with learnings" if after.learnings else ""))
    if by_learning:
        assert after.code in ("learning_blocked", "policy_error")
        blocking = next(r for r in rows if f"learning:{r['id']}" == after.rule)
        assert blocking["severity"] == "error"
        assert (after.agent, after.agent_version, after.tenant) == (before.agent, before.agent_version, before.tenant)
        assert not after.HasField("grant") and not after.child_run_token
    else:
        assert _without_advice(after) == before, (before, after)
    if after.learnings:
        assert request.WhichOneof("action") == "tool_call" and len(request.run.actor_chain) > 1
        acting = request.run.actor_chain[-1].id
        for note in after.learnings:
            row = next(r for r in rows if r["id"] == note.id)
            assert row["tenant"] == after.tenant and row["agent"] in ("", acting)
            assert (note.severity, note.text, note.reviewed_by) == (row["severity"], row["text"], "carol")


def test_a_learning_that_matches_everything_only_ever_warns_or_denies():
    """The widest learning there is (`true`, every agent, error) over every tool of every agent:
    each answer is the plain one, or DENY learning_blocked where the plain one let the call go on."""
    plain = policies()
    for severity in ("warning", "error"):
        rows = [{"id": "lrn-all", "tenant": "acme", "agent": "", "severity": severity, "text": "everything",
                 "reviewed_by": "carol", "match": "true"}]
        advised = plain.with_learnings(build_index(rows, plain.cel_engine))
        for chain in CHAINS:
            for tool, cases in ARGUMENTS.items():
                for args in cases:
                    request = pb.CheckRequest(run=pb.RunContext(run_id="run-1", mode=pb.RUN_MODE_INTERACTIVE))
                    request.run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="alice")
                    for i, name in enumerate(chain):
                        request.run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id=name, run_id=f"run-{i}",
                                                    agent_version=plain.agents[name].version)
                    request.tool_call.tool = tool
                    request.tool_call.arguments.update(args)
                    before, after = _decide(plain, request, False), _decide(advised, request, False)
                    if before.verdict in (pb.VERDICT_ALLOW, pb.VERDICT_REQUIRE_APPROVAL) and chain:
                        if severity == "error":
                            assert (after.verdict, after.code) == (pb.VERDICT_DENY, "learning_blocked")
                        else:
                            assert _without_advice(after) == before and [n.id for n in after.learnings] == ["lrn-all"]
                    else:
                        assert after == before
