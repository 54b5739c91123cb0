"""Callers ask; the checkpoint establishes who acts, for whom, in which run, and who approved.

One test per way a caller used to talk the checkpoint into a call the policy files forbid:
self-approval, an invented or impersonated person or agent, a child posing as a root
run, an empty run id, an approval carried over to a call that differs only in masked
arguments, one approval raced many times, and refusals filed under someone else's run.
Every test goes through a real gRPC server on a real port, with the shipped policies.
"""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from server.conftest import PERSON_TOKEN, TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

SUBNET = {"template": "web", "target": "10.20.0.0/24"}  # recon: approve_if a whole subnet
REFUND = {"invoice_id": "inv-7", "payment_id": "pay_9", "customer": "customer:bob", "amount_usd": 40,
          "reason": "double charge", "card_number": "4111111111111111"}


def call(token: str, tool: str, args: dict) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool=tool))
    req.tool_call.arguments.update(args)
    return req


def ask(checkpoint, agent="recon", tool="create_task_from_template", args=SUBNET):
    run = checkpoint.start_run(agent)
    asked = checkpoint.stub().Check(call(run.run_token, tool, args), timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return run, asked.decision_id


def with_approval(req: pb.CheckRequest, decision_id: str, token: str) -> pb.CheckRequest:
    req.approval.decision_id, req.approval.token = decision_id, token
    return req


def principal(policy_dir: Path, name: str, body: str) -> None:
    (policy_dir / "principals" / f"{name}.yaml").write_text(f"kind: Principal\nname: {name}\n{body}")


# -- self-approval ----------------------------------------------------------------------------


def test_the_caller_asking_cannot_approve_its_own_call(checkpoint):
    run, asked_id = ask(checkpoint)
    # the driver's credential has no approve right: Approve is refused and recorded
    refused = checkpoint.stub(TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert (refused.decision.verdict, refused.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    assert not refused.approval_token
    assert checkpoint.records()[-1]["caller"] == "driver"
    # naming the decision with no token, or with a token it made up, approves nothing
    for token in ("", "wapv1.eyJhcHByb3ZlciI6ImFueW9uZSJ9.AAAA", refused.approval_token):
        got = checkpoint.stub().Check(
            with_approval(call(run.run_token, "create_task_from_template", SUBNET), asked_id, token), timeout=5)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_invalid") and not got.HasField("grant")


def test_a_person_may_not_approve_their_own_run_when_the_policy_says_so(checkpoint, policy_dir):
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace("own_runs: true", "own_runs: false"))
    assert checkpoint.server.store.reload()
    run = checkpoint.start_run("recon", person="carol")  # the driver vouches for carol
    asked = checkpoint.stub().Check(call(run.run_token, "create_task_from_template", SUBNET), timeout=5)
    own = checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked.decision_id),
                                                timeout=5)
    assert (own.decision.verdict, own.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    assert "accountable" in own.decision.reason and not own.approval_token
    # carol may still approve alice's run
    other, other_id = ask(checkpoint)
    ok = checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=other.run_id, decision_id=other_id), timeout=5)
    assert ok.decision.code == "approved" and ok.approval_token


def test_an_approver_outside_the_rule_or_agent_named_is_refused(checkpoint, policy_dir):
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace('rules: ["*"]', "rules: [refund-writes-need-approval]"))
    assert checkpoint.server.store.reload()
    run, asked_id = ask(checkpoint)  # asked by rule wide-scans-need-approval
    got = checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")


# -- claimed identities -------------------------------------------------------------------------


def test_an_invented_person_is_vouched_for_by_no_one(checkpoint):
    # carol's own credential may start runs only as carol (persons: self)
    got = checkpoint.start_run("", person="mallory", token=PERSON_TOKEN, tenant="acme")
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    assert not got.run_token and checkpoint.records()[-1]["accountable_person"] == "mallory"


def test_a_principal_vouches_only_for_the_persons_it_lists(start, policy_dir):
    principal(policy_dir, "frontdesk", 'identities: ["token:driver"]\ncheck: {tenants: [acme], agents: [ops], '
                                       "persons: [alice]}\n")
    (policy_dir / "principals" / "driver.yaml").unlink()
    checkpoint = start()
    assert checkpoint.start_run("ops").decision.verdict == pb.VERDICT_ALLOW
    invented = checkpoint.start_run("ops", person="eve")
    assert (invented.decision.verdict, invented.decision.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    other_agent = checkpoint.start_run("recon")  # an agent outside its rights
    assert other_agent.decision.code == "caller_not_permitted"


def test_a_credential_that_names_no_principal_decides_nothing(start, policy_dir):
    (policy_dir / "principals" / "people.yaml").unlink()  # carol's token line now names no principal
    checkpoint = start()
    got = checkpoint.start_run("recon", token=PERSON_TOKEN)
    assert got.decision.code == "caller_not_permitted" and "names no principal" in got.decision.reason
    run = checkpoint.start_run("recon")
    refused = checkpoint.stub(PERSON_TOKEN).Check(call(run.run_token, "get_task", {"task_id": "task-1"}), timeout=5)
    assert (refused.verdict, refused.code) == (pb.VERDICT_DENY, "caller_not_permitted")
    with pytest.raises(grpc.RpcError) as err:
        checkpoint.stub(PERSON_TOKEN).ResolveAgent(pb.ResolveAgentRequest(agent="recon"), timeout=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


def test_a_claimed_agent_version_or_person_is_not_the_tokens(checkpoint):
    run = checkpoint.start_run("recon")
    for name, actor in (("agent", pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="ops", agent_version=checkpoint.version("ops"))),
                        ("person", pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="mallory"))):
        req = call(run.run_token, "cancel_task", {"task_id": "task-1"})
        req.run.actor_chain.extend([pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"), actor]
                                   if name == "agent" else [actor, pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon")])
        got = checkpoint.stub().Check(req, timeout=5)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_token_invalid"), name


# -- which run ----------------------------------------------------------------------------------


def test_a_child_cannot_pose_as_a_root_run_to_regain_a_narrowed_tool(checkpoint):
    parent = checkpoint.start_run("recon")
    req = pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token),
                          delegation=pb.Delegation(agent="triage", narrowing=pb.Scope(tools=["list_templates"])))
    allowed = checkpoint.stub().Check(req, timeout=5)
    assert allowed.verdict == pb.VERDICT_ALLOW
    child_call = call(allowed.child_run_token, "get_task", {"task_id": "task-1"})
    assert checkpoint.stub().Check(child_call, timeout=5).code == "tool_not_allowed"
    # the child's run presented as a root: its own run id with a root's chain
    posing = call("", "get_task", {"task_id": "task-1"})
    posing.run.run_id = allowed.child_run_id
    posing.run.actor_chain.extend([pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                                   pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="triage",
                                            agent_version=allowed.child_agent_version)])
    got = checkpoint.stub().Check(posing, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_token_invalid") and not got.HasField("grant")
    # nor under the parent's token with the child's id
    posing.run.run_token = parent.run_token
    assert checkpoint.stub().Check(posing, timeout=5).code == "run_token_invalid"
    # and StartRun cannot name the child's id: run ids are minted, a new root is a new run
    fresh = checkpoint.start_run("triage")
    assert fresh.run_id != allowed.child_run_id


def test_an_empty_run_id_gets_no_grant(checkpoint):
    req = call("", "get_task", {"task_id": "task-1"})
    req.run.actor_chain.extend([pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                                pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon", agent_version=checkpoint.version("recon"))])
    req.run.mode = pb.RUN_MODE_INTERACTIVE
    got = checkpoint.stub().Check(req, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_token_invalid") and not got.HasField("grant")


def test_a_refusal_is_never_filed_under_a_run_the_caller_only_claims(checkpoint):
    victim = checkpoint.start_run("recon")
    forged = call("", "get_task", {"task_id": "task-1"})
    forged.run.run_id, forged.run.root_run_id = victim.run_id, victim.run_id
    assert checkpoint.stub().Check(forged, timeout=5).code == "run_token_invalid"
    with pytest.raises(grpc.RpcError):  # unauthenticated, with the victim's run id
        checkpoint.stub(token="not-a-token-0123456789").Check(forged, timeout=5)
    # nor through Approve / Reject of a decision that is not the run's
    person = checkpoint.stub(PERSON_TOKEN)
    approve = person.Approve(pb.ApproveRequest(run_id=victim.run_id, decision_id="made-up"), timeout=5)
    reject = person.Reject(pb.RejectRequest(run_id=victim.run_id, decision_id="made-up"), timeout=5)
    assert approve.decision.code == reject.decision.code == "approval_invalid"
    assert "claimed run" in checkpoint.records()[-1]["reason"]
    in_run = [r for r in checkpoint.records() if r["run_id"] == victim.run_id]
    assert [r["action"] for r in in_run] == ["start_run"]


# -- approvals bind the whole call, once ---------------------------------------------------------


def test_an_approval_does_not_cover_a_change_to_a_masked_argument(checkpoint):
    run, asked_id = ask(checkpoint, agent="refunds", tool="propose_refund", args=REFUND)
    token = checkpoint.stub(PERSON_TOKEN).Approve(
        pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5).approval_token
    for field, value in (("reason", "something else entirely"), ("card_number", "5500000000000004")):
        changed = dict(REFUND, **{field: value})  # `reason` is dropped from the log, the card hashed
        got = checkpoint.stub().Check(with_approval(call(run.run_token, "propose_refund", changed), asked_id, token),
                                      timeout=5)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_invalid"), field
    honest = checkpoint.stub().Check(with_approval(call(run.run_token, "propose_refund", REFUND), asked_id, token),
                                     timeout=5)
    assert honest.verdict == pb.VERDICT_ALLOW and honest.HasField("grant")


def race(stubs: list, request: pb.CheckRequest) -> list[pb.CheckResponse]:
    """Send `request` on every stub at the same moment (a barrier releases them together)."""
    barrier = threading.Barrier(len(stubs))

    def send(stub) -> pb.CheckResponse:
        barrier.wait()
        return stub.Check(request, timeout=10)

    with ThreadPoolExecutor(len(stubs)) as pool:
        return list(pool.map(send, stubs))


def test_one_approval_sent_many_times_at_once_allows_exactly_one_call(checkpoint):
    for _ in range(5):
        run, asked_id = ask(checkpoint)
        token = checkpoint.stub(PERSON_TOKEN).Approve(
            pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5).approval_token
        request = with_approval(call(run.run_token, "create_task_from_template", SUBNET), asked_id, token)
        answers = race([checkpoint.stub() for _ in range(24)], request)
        allowed = [a for a in answers if a.verdict == pb.VERDICT_ALLOW]
        assert len(answers) == 24 and len(allowed) == 1 and allowed[0].HasField("grant")
        assert {a.code for a in answers if a.verdict != pb.VERDICT_ALLOW} == {"approval_invalid"}


# -- reading the log is a right too -------------------------------------------------------------


def test_the_decision_stream_needs_the_audit_right(checkpoint):
    with pytest.raises(grpc.RpcError) as err:
        list(checkpoint.stub(TOKEN).WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5))
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED and "caller_not_permitted" in err.value.details()
    seen = list(checkpoint.stub(PERSON_TOKEN).WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5))
    # so far only the first load's catalog records (each agent going live), all of the person's tenant
    assert seen and {(r.record.action, r.record.tenant) for r in seen} == {("catalog", "acme")}


# -- found in review: each approve-if rule has its approvers, pinned runs spend approvals too -----


def test_an_approver_of_one_rule_does_not_pass_another_rule_of_the_same_call(start, policy_dir):
    (policy_dir / "rules" / "security.yaml").write_text(
        "kind: Rule\nname: security-signs-subnet-scans\neffect: approve_if\n"
        "condition: 'args.target.contains(\"/\")'\ntools: [create_task_from_template]\n")
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace('rules: ["*"]', "rules: [wide-scans-need-approval]"))
    checkpoint = start()
    run, asked_id = ask(checkpoint)
    record = checkpoint.records()[-1]
    assert sorted(record["approval_rules"].split(",")) == ["rule:security-signs-subnet-scans",
                                                          "rule:wide-scans-need-approval"]
    # carol may approve only one of the two rules the call asks: she may not approve it at all
    got = checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert (got.decision.code, got.approval_token) == ("caller_not_permitted", "")
    assert "security-signs-subnet-scans" in got.decision.reason


def test_an_approval_needed_only_under_the_pinned_revision_is_bound_and_spent(checkpoint, policy_dir):
    run, asked_id = ask(checkpoint)
    rules = policy_dir / "rules" / "recon.yaml"
    rules.write_text(rules.read_text().replace("condition: 'touched.subjects.exists(s, s.range)'", "condition: 'false'"))
    assert checkpoint.server.store.reload()
    token = checkpoint.stub(PERSON_TOKEN).Approve(
        pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5).approval_token
    other = with_approval(call(run.run_token, "create_task_from_template", dict(SUBNET, target="10.20.0.0/25")),
                          asked_id, token)
    wrong = checkpoint.stub().Check(other, timeout=5)
    assert (wrong.verdict, wrong.code) == (pb.VERDICT_DENY, "approval_invalid")  # bound to the call asked
    request = with_approval(call(run.run_token, "create_task_from_template", SUBNET), asked_id, token)
    first = checkpoint.stub().Check(request, timeout=5)
    assert (first.verdict, first.rule) == (pb.VERDICT_ALLOW, "approval") and first.HasField("grant")
    again = checkpoint.stub().Check(request, timeout=5)
    assert (again.verdict, again.code) == (pb.VERDICT_DENY, "approval_invalid")  # spent once


def test_a_persons_run_token_is_theirs_alone(start):
    bob = "bob-token-0123456789abcdef"
    both = start(auth=AuthPolicy(tokens={hashlib.sha256(PERSON_TOKEN.encode()).digest(): "carol",
                                         hashlib.sha256(bob.encode()).digest(): "bob",
                                         hashlib.sha256(TOKEN.encode()).digest(): "driver"}))
    carols = both.start_run("", person="carol", token=PERSON_TOKEN, tenant="acme")
    assert carols.run_token
    req = call(carols.run_token, "get_task", {"task_id": "task-1"})
    assert both.stub(PERSON_TOKEN).Check(req, timeout=5).verdict == pb.VERDICT_ALLOW
    stolen = both.stub(bob).Check(req, timeout=5)  # the same principal (people), another person
    assert (stolen.verdict, stolen.code) == (pb.VERDICT_DENY, "run_token_invalid")


def test_a_refusal_before_the_run_is_established_is_recorded_bounded(checkpoint):
    req = call("garbage", "t" * 900_000, {"task_id": "task-1"})
    assert checkpoint.stub().Check(req, timeout=30).code == "run_token_invalid"
    record = checkpoint.records()[-1]
    assert record["code"] == "run_token_invalid" and len(record["tool"]) < 400


def test_a_rejection_is_final(checkpoint):
    run, asked_id = ask(checkpoint)
    token = checkpoint.stub(PERSON_TOKEN).Approve(
        pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5).approval_token
    rejected = checkpoint.stub(PERSON_TOKEN).Reject(pb.RejectRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert rejected.decision.code == "rejected"
    # an approval made before the rejection is not honoured after it, nor is a new one given
    got = checkpoint.stub().Check(with_approval(call(run.run_token, "create_task_from_template", SUBNET),
                                                asked_id, token), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_invalid") and "rejected by carol" in got.reason
    again = checkpoint.stub(PERSON_TOKEN).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked_id), timeout=5)
    assert (again.decision.code, again.approval_token) == ("approval_invalid", "")


def test_an_auditor_reads_only_the_tenants_it_may(checkpoint):
    run = checkpoint.start_run("", tenant="default")  # the driver starts a run in another tenant
    assert run.run_token
    acme = checkpoint.start_run("recon")
    stream = checkpoint.stub(PERSON_TOKEN).WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5)
    seen = [r.record for r in stream]
    assert {r.tenant for r in seen} == {"acme"} and acme.run_id in {r.run_id for r in seen}


def test_a_recorded_act_names_only_a_person_the_caller_may_vouch_for(checkpoint):
    run = checkpoint.start_run("recon")
    act = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="resume", person="alice")
    assert checkpoint.stub().RecordAct(act, timeout=5).decision.code == "recorded"  # the driver vouches
    mine = checkpoint.start_run("", person="carol", token=PERSON_TOKEN, tenant="acme")
    forged = pb.RecordActRequest(run=pb.RunContext(run_token=mine.run_token), act="cancel", person="alice")
    got = checkpoint.stub(PERSON_TOKEN).RecordAct(forged, timeout=5).decision
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "caller_not_permitted")  # carol acts only as carol
    unknown = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="delete", person="alice")
    assert checkpoint.stub().RecordAct(unknown, timeout=5).decision.code == "invalid_request"
    nobody = pb.RecordActRequest(run=pb.RunContext(run_id=run.run_id), act="resume", person="alice")
    assert checkpoint.stub().RecordAct(nobody, timeout=5).decision.code == "run_token_invalid"
    assert [r["action"] for r in checkpoint.records() if r["run_id"] == run.run_id] == ["start_run", "resume"]


def test_a_principal_asks_only_for_the_agents_it_may_whatever_run_it_holds(checkpoint, policy_dir):
    """The agent a check is for is the run token's last link, and the caller's rights are asked
    about that agent (a root run's and a child's), not about the person at the head of the chain."""
    recon = checkpoint.start_run("recon")
    child = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=recon.run_token),
                                                    delegation=pb.Delegation(agent="triage")), timeout=5)
    assert child.verdict == pb.VERDICT_ALLOW
    driver = policy_dir / "principals" / "driver.yaml"
    for agents, recon_ok, triage_ok in (("[recon]", True, False), ("[triage]", False, True)):
        driver.write_text(driver.read_text().replace('agents: ["*"]', f"agents: {agents}")
                          .replace("agents: [recon]", f"agents: {agents}").replace("agents: [triage]", f"agents: {agents}"))
        assert checkpoint.server.store.reload()
        for token, ok in ((recon.run_token, recon_ok), (child.child_run_token, triage_ok)):
            got = checkpoint.stub().Check(call(token, "list_templates", {}), timeout=5)
            assert (got.code != "caller_not_permitted") == ok, (agents, got.reason)
            if not ok:
                assert (got.verdict, got.rule) == (pb.VERDICT_DENY, "principal")
