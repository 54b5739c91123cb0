"""A delegated run's chain is vouched for by the checkpoint's chain token: nothing can be dropped."""

from __future__ import annotations

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import run_context


def delegate(checkpoint, narrowing=None):
    version = checkpoint.version("recon")
    req = pb.CheckRequest(run=run_context("recon", version), delegation=pb.Delegation(agent="triage"))
    if narrowing:
        req.delegation.narrowing.CopyFrom(narrowing)
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW, resp
    assert resp.chain_token and resp.child_agent_version == checkpoint.version("triage")
    return req, resp


def child_call(req, resp, *, token=None, narrowing=None, budget=None):
    run = pb.RunContext()
    run.CopyFrom(req.run)
    run.run_id = "run-child"
    run.chain_token = resp.chain_token if token is None else token
    run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id="triage", agent_version=resp.child_agent_version,
                        narrowing=req.delegation.narrowing if narrowing is None else narrowing,
                        budget=resp.child_budget if budget is None else budget)
    call = pb.CheckRequest(run=run, tool_call=pb.ToolCall(tool="get_task"))
    call.tool_call.arguments.update({"task_id": "task-1"})
    return call


def test_a_child_with_its_chain_token_is_decided_as_usual(checkpoint):
    req, resp = delegate(checkpoint)
    got = checkpoint.stub().Check(child_call(req, resp), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_ALLOW, "allowed") and got.HasField("grant")


def test_a_child_without_the_token_is_refused_and_recorded(checkpoint):
    req, resp = delegate(checkpoint)
    got = checkpoint.stub().Check(child_call(req, resp, token=""), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "chain_unverified") and not got.HasField("grant")
    assert checkpoint.records()[-1]["code"] == "chain_unverified"


def test_dropping_the_narrowing_the_parent_asked_for_breaks_the_token(checkpoint):
    req, resp = delegate(checkpoint, narrowing=pb.Scope(tools=["list_templates"]))
    honest = checkpoint.stub().Check(child_call(req, resp), timeout=5)
    assert honest.code == "tool_not_allowed"  # get_task was narrowed away
    widened = checkpoint.stub().Check(child_call(req, resp, narrowing=pb.Scope()), timeout=5)
    assert (widened.verdict, widened.code) == (pb.VERDICT_DENY, "chain_unverified")


def test_the_child_link_carries_the_granted_budget_and_no_other(checkpoint):
    version = checkpoint.version("recon")
    run = run_context("recon", version)
    run.budget.tokens = 5000  # the parent's own ceiling, in its run context only
    req = pb.CheckRequest(run=run, delegation=pb.Delegation(agent="triage"))
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW and resp.child_budget.tokens == 5000
    # The child's own run budget says more; the signed link still holds it to what was granted.
    call = child_call(req, resp)
    call.run.budget.tokens = 10**9
    call.counters.stretch_tokens = 6000
    got = checkpoint.stub().Check(call, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_HALT, "breaker_tokens")
    # Dropping the granted budget from the link breaks the token.
    widened = checkpoint.stub().Check(child_call(req, resp, budget=pb.Budget()), timeout=5)
    assert (widened.verdict, widened.code) == (pb.VERDICT_DENY, "chain_unverified")
