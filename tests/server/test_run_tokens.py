"""Runs are established by the checkpoint: StartRun mints the id and a signed run token, an allowed
delegation mints the child's; every check presents its token, and nothing in it can be changed."""

from __future__ import annotations

import pytest
from google.protobuf.struct_pb2 import Struct, Value

from checkpoint.server import runs as runs_module
from checkpoint.server.runs import Refused, RunTokens
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.token_keys import KeySet
from warden.tokens import RUN_LABEL, RUN_TOKEN_TTL_SECONDS, Signer

from .conftest import PERSON_TOKEN
from .helpers import tool_call


def started(checkpoint, agent="recon", **kw) -> pb.StartRunResponse:
    got = checkpoint.start_run(agent, **kw)
    assert got.decision.verdict == pb.VERDICT_ALLOW, got.decision
    return got


def call(token: str, tool="get_task", args=None) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool=tool))
    req.tool_call.arguments.update(args or {"task_id": "task-1"})
    return req


def test_start_run_mints_the_run_and_pins_the_current_version(checkpoint):
    got = started(checkpoint)
    assert got.run_id.startswith("run-") and got.run_token.startswith("wrun2.")
    assert got.agent.agent_version == checkpoint.version("recon") and got.agent.tools
    record = checkpoint.records()[-1]
    assert (record["action"], record["verdict"], record["run_id"]) == ("start_run", "ALLOW", got.run_id)
    assert (record["principal"], record["caller"], record["accountable_person"]) == ("driver", "driver", "alice")
    other = started(checkpoint)
    assert other.run_id != got.run_id  # ids are minted, never reused


def test_a_check_is_decided_under_the_tokens_run(checkpoint):
    got = started(checkpoint)
    resp = checkpoint.stub().Check(call(got.run_token), timeout=5)
    assert (resp.verdict, resp.accountable_person, resp.tenant) == (pb.VERDICT_ALLOW, "alice", "acme")
    assert resp.grant.run_id == got.run_id
    assert checkpoint.records()[-1]["run_id"] == got.run_id


def test_a_check_without_a_token_is_refused_and_recorded(checkpoint):
    req = tool_call("recon", checkpoint.version("recon"), "get_task", {"task_id": "task-1"})
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "run_token_invalid") and not resp.HasField("grant")
    assert resp.rule == "run_token" and "presents the run token" in resp.reason
    assert checkpoint.records()[-1]["code"] == "run_token_invalid"


def test_a_forged_or_altered_token_is_refused(checkpoint):
    token = started(checkpoint).run_token
    label, kid, payload, signature = token.split(".")
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    for bad in (f"{label}.{kid}.{payload}.{flipped}", f"{label}.{kid}.{payload[:-4]}.{signature}", "wrun2...",
                "x" * 70000, "wapv2." + kid + "." + payload + "." + signature):
        resp = checkpoint.stub().Check(call(bad), timeout=5)
        assert (resp.verdict, resp.code, resp.rule) == (pb.VERDICT_DENY, "run_token_invalid", "run_token"), bad[:40]
        assert resp.reason.startswith("the run token is not valid"), bad[:40]


def test_fields_that_contradict_the_token_are_refused(checkpoint):
    got = started(checkpoint)
    for field, value in (("run_id", "run-other"), ("tenant", "other"), ("root_run_id", "run-x"),
                         ("parent_run_id", "run-y")):
        req = call(got.run_token)
        setattr(req.run, field, value)
        resp = checkpoint.stub().Check(req, timeout=5)
        assert (resp.verdict, resp.code, resp.rule) == (pb.VERDICT_DENY, "run_token_invalid", "run_token"), field
        assert resp.reason.startswith(f"run.{field} is not the run token's")
    req = call(got.run_token)
    req.run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="mallory")
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.code, resp.rule, resp.reason) == ("run_token_invalid", "run_token", "run.actor_chain is not the run token's")
    req = call(got.run_token)
    req.run.mode = pb.RUN_MODE_BACKGROUND
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.code, resp.rule, resp.reason) == ("run_token_invalid", "run_token", "run.mode is not the run token's")
    # the same values as the token's are fine
    req = call(got.run_token)
    req.run.run_id, req.run.tenant = got.run_id, "acme"
    assert checkpoint.stub().Check(req, timeout=5).verdict == pb.VERDICT_ALLOW


def test_a_token_is_bound_to_the_principal_it_was_issued_to(checkpoint):
    got = checkpoint.start_run("", person="carol", token=PERSON_TOKEN, tenant="acme")  # a person acting as themselves
    assert got.decision.verdict == pb.VERDICT_ALLOW, got.decision
    req = pb.CheckRequest(run=pb.RunContext(run_token=got.run_token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-1"})
    resp = checkpoint.stub().Check(req, timeout=5)  # presented by the driver principal
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "run_token_invalid")
    own = checkpoint.stub(PERSON_TOKEN).Check(req, timeout=5)
    assert own.verdict == pb.VERDICT_ALLOW and not own.HasField("grant")  # a person gets no grant


def delegate(checkpoint, narrowing=None, budget=None):
    got = started(checkpoint)
    run = pb.RunContext(run_token=got.run_token)
    if budget is not None:
        run.budget.CopyFrom(budget)
    req = pb.CheckRequest(run=run, delegation=pb.Delegation(agent="triage"))
    if narrowing is not None:
        req.delegation.narrowing.CopyFrom(narrowing)
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW, resp
    assert resp.child_run_id and resp.child_run_token and resp.child_agent_version == checkpoint.version("triage")
    return got, resp


def test_a_child_is_decided_under_its_own_token(checkpoint):
    parent, resp = delegate(checkpoint)
    got = checkpoint.stub().Check(call(resp.child_run_token), timeout=5)
    assert (got.verdict, got.agent) == (pb.VERDICT_ALLOW, "triage") and got.grant.run_id == resp.child_run_id
    record = checkpoint.records()[-1]
    assert (record["parent_run_id"], record["root_run_id"]) == (parent.run_id, parent.run_id)
    assert [a["id"] for a in record["actor_chain"]] == ["alice", "recon", "triage"]


def test_the_narrowing_the_parent_asked_for_binds_the_child(checkpoint):
    _, resp = delegate(checkpoint, narrowing=pb.Scope(tools=["list_templates"]))
    got = checkpoint.stub().Check(call(resp.child_run_token), timeout=5)
    assert got.code == "tool_not_allowed"  # get_task was narrowed away
    # the chain cannot be sent without its narrowing: the fields must be the token's
    req = call(resp.child_run_token)
    req.run.actor_chain.add(kind=pb.ACTOR_KIND_PERSON, id="alice")
    req.run.actor_chain.add(kind=pb.ACTOR_KIND_AGENT, id="triage", agent_version=resp.child_agent_version)
    assert checkpoint.stub().Check(req, timeout=5).code == "run_token_invalid"


def test_the_child_link_carries_the_granted_budget_and_no_other(checkpoint):
    _, resp = delegate(checkpoint, budget=pb.Budget(tokens=5000))
    assert resp.child_budget.tokens == 5000
    # The child's own run budget says more; the signed link still holds it to what was granted.
    req = call(resp.child_run_token)
    req.run.budget.tokens = 10**9
    req.counters.stretch_tokens = 6000
    got = checkpoint.stub().Check(req, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_HALT, "breaker_tokens")


def test_start_run_refusals_are_recorded_with_stable_codes(checkpoint):
    cases = [
        (dict(agent="nobody"), "unknown_agent"),
        (dict(agent="recon", version="0" * 20), "unknown_agent_version"),
        (dict(agent="recon", person=""), "invalid_request"),
        (dict(agent="recon", mode=pb.RUN_MODE_UNSPECIFIED), "invalid_request"),
        (dict(agent="recon", tenant="other"), "invalid_request"),
    ]
    for kwargs, code in cases:
        got = checkpoint.start_run(**kwargs)
        assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, code), kwargs
        assert not got.run_token and not got.run_id
        record = checkpoint.records()[-1]
        assert (record["action"], record["code"]) == ("start_run", code)
    got = checkpoint.start_run(agent="recon", mode=7)  # a number the enum does not have
    assert got.decision.code == "invalid_request"
    assert got.decision.reason == "mode must be RUN_MODE_INTERACTIVE or RUN_MODE_BACKGROUND, not 7"
    got = checkpoint.start_run(agent="recon", mode=pb.RUN_MODE_UNSPECIFIED)
    assert got.decision.reason.endswith("not RUN_MODE_UNSPECIFIED")


def test_a_run_started_with_inputs_is_decided_under_them(checkpoint):
    got = started(checkpoint, inputs=Struct(fields={"ticket": Value(string_value="T-1")}))
    resp = checkpoint.stub().Check(call(got.run_token), timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_ALLOW, "allowed"), resp
    restated = call(got.run_token)
    restated.run.inputs.update({"ticket": "T-1"})
    assert checkpoint.stub().Check(restated, timeout=5).verdict == pb.VERDICT_ALLOW
    restated.run.inputs.update({"ticket": "T-2"})
    resp = checkpoint.stub().Check(restated, timeout=5)
    assert (resp.code, resp.rule, resp.reason) == ("run_token_invalid", "run_token", "run.inputs are not the run token's")


def test_a_signed_token_whose_claims_are_not_a_run_is_refused():
    keys = KeySet(None)
    runs = RunTokens(keys)
    signer = Signer(keys, RUN_LABEL, RUN_TOKEN_TTL_SECONDS)  # the checkpoint's own key, claims it never issues
    for claims in ({"run_id": "run-1"}, {"run_id": "run-1", "root_run_id": "", "parent_run_id": "", "tenant": "acme",
                                         "mode": 1, "chain": [{"kind": "nonsense"}], "inputs": None, "principal": "p"}):
        with pytest.raises(Refused) as refused:
            runs.establish(pb.CheckRequest(run=pb.RunContext(run_token=signer.sign(claims))))
        assert (refused.value.code, refused.value.rule) == ("run_token_invalid", "run_token")
        assert "not well formed" in refused.value.reason


def test_verified_tokens_are_remembered_within_a_bound(monkeypatch):
    """Tokens are memoised so a run's every call does not re-verify its token; the memo is bounded,
    so a flood of distinct valid tokens cannot grow it without end."""
    monkeypatch.setattr(runs_module, "_MEMO_SIZE", 3)
    runs = RunTokens(KeySet(None))
    issued = []
    for i in range(6):
        run = pb.RunContext(run_id=f"run-{i}", tenant="acme", actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="a")])
        issued.append(runs.issue(run, "driver", "rev"))
        got = runs.establish(pb.CheckRequest(run=pb.RunContext(run_token=issued[-1])))
        assert got.run.run_id == f"run-{i}" and got.principal == "driver"
        assert len(runs._memo) <= 3
    # the oldest were dropped, not refused: presented again, they verify again
    assert runs.establish(pb.CheckRequest(run=pb.RunContext(run_token=issued[0]))).run.run_id == "run-0"


def test_a_grandchild_run_names_the_root_run_as_its_root(start, policy_dir):
    triage = policy_dir / "agents" / "triage.yaml"
    triage.write_text(triage.read_text() + "delegates: [ops]\n")
    checkpoint = start()
    root = started(checkpoint)

    def delegate_from(token: str, agent: str) -> pb.CheckResponse:
        got = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=token),
                                                      delegation=pb.Delegation(agent=agent)), timeout=5)
        assert got.verdict == pb.VERDICT_ALLOW, got
        return got

    child = delegate_from(root.run_token, "triage")
    grandchild = delegate_from(child.child_run_token, "ops")
    assert checkpoint.records()[-1]["root_run_id"] == root.run_id  # the delegation, decided in the child
    resp = checkpoint.stub().Check(call(grandchild.child_run_token, "list_templates", {}), timeout=5)
    record = checkpoint.records()[-1]
    assert record["decision_id"] == resp.decision_id
    assert (record["run_id"], record["parent_run_id"], record["root_run_id"]) == (
        grandchild.child_run_id, child.child_run_id, root.run_id)


def test_a_child_run_inherits_the_parents_tenant_and_inputs_and_its_link_names_its_run(checkpoint, policy_dir):
    driver = policy_dir / "principals" / "driver.yaml"
    driver.write_text(driver.read_text().replace('tenants: ["*"]', "tenants: [acme]"))  # rights for acme only
    assert checkpoint.server.store.reload()
    parent = started(checkpoint, inputs=Struct(fields={"ticket": Value(string_value="T-1")}))
    child = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token),
                                                    delegation=pb.Delegation(agent="triage")), timeout=5)
    assert child.verdict == pb.VERDICT_ALLOW, child
    req = call(child.child_run_token)
    req.run.inputs.update({"ticket": "T-1"})  # the parent's inputs are the child's
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.verdict, resp.tenant) == (pb.VERDICT_ALLOW, "acme"), resp
    record = checkpoint.records()[-1]
    assert (record["tenant"], record["run_id"]) == ("acme", child.child_run_id)
    assert record["actor_chain"][-1] == {"kind": "agent", "id": "triage", "agent_version": child.child_agent_version,
                                         "run_id": child.child_run_id}
