"""Roles per tenant at the checkpoint: the principal's rights and the tenant's roles must agree.

Two tenants over real gRPC: the shipped `acme` (alice admin; bob and carol operate, approve and
audit) and a test tenant `globex` (dave and carol operate, erin approves, frank audits, nobody is
admin), plus `initech`, which declares no roles. Each role is tried at its edge, allowed and
refused; every refusal is a recorded DENY `role_required` naming the person, the role and the
tenant. The attacks: another spelling of a person's name, a person named in another tenant's
roles, a tenant without roles, a delegation into another tenant.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import grpc
import pytest
from server.conftest import TOKEN

from checkpoint.policy import load_policy_dir
from checkpoint.policy.roles import auditor_tenants, role_refusal, roles_by_tenant
from checkpoint.policylint import warnings
from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

SUBNET = {"template": "web", "target": "10.20.0.0/24"}  # approve_if a whole subnet (any agent)
PERSONS = ("alice", "bob", "carol", "dave", "erin", "frank", "zed", "Carol", "siem")
TOKENS = {name: f"{name}-token-0123456789abcdef" for name in PERSONS}

GLOBEX = """\
kind: Tenant
name: globex
roles:
  operator: [dave, carol]
  approver: [erin]
  auditor: [frank]
"""
SCOUT = """\
kind: Agent
name: scout
tenant: globex
persona: You run reconnaissance for globex from approved templates, against the lab only.
allowlist: [create_task_from_template, get_task, list_templates]
scope:
  access: [read, write]
  images: ["recon/nmap:*", "recon/httpx:*"]
  nodes: ["lab-node-*"]
  subjects: ["*.lab.example.com", "10.20.0.*", "10.20.0.0/24"]
"""
# templates are the tenant's own (docs/skills.md): globex's scans use a reviewed template of globex
WEB = "kind: Template\nname: web\ntenant: globex\nspec: {image: 'recon/httpx:1.6', command: [httpx, -u, TARGET]}\n"
INITECH = "kind: Tenant\nname: initech\n"  # no roles: the principals' rights alone
# a process that reads the whole log (a log shipper): `*` is not narrowed by any tenant's roles
SIEM = 'kind: Principal\nname: siem\nidentities: ["token:siem"]\naudit: {tenants: ["*"]}\n'


def write_tenants(policy_dir: Path) -> None:
    (policy_dir / "tenants" / "globex.yaml").write_text(GLOBEX)
    (policy_dir / "tenants" / "initech.yaml").write_text(INITECH)
    (policy_dir / "agents" / "scout.yaml").write_text(SCOUT)
    (policy_dir / "templates" / "globex.yaml").write_text(WEB)
    (policy_dir / "principals" / "siem.yaml").write_text(SIEM)
    people = policy_dir / "principals" / "people.yaml"
    text = people.read_text()
    assert text.count("tenants: [acme]") == 3
    people.write_text(text.replace("tenants: [acme]", "tenants: [acme, globex, initech]"))


def digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@pytest.fixture
def cp(start, policy_dir):
    write_tenants(policy_dir)
    tokens = {digest(TOKEN): "driver", **{digest(t): name for name, t in TOKENS.items()}}
    return start(auth=AuthPolicy(tokens=tokens))


def as_(person: str) -> str:
    return TOKENS[person]


def refused_for_role(decision: pb.CheckResponse, person: str, role: str, tenant: str) -> bool:
    return (decision.verdict == pb.VERDICT_DENY and decision.code == "role_required"
            and f"{person!r}" in decision.reason and role in decision.reason and f"{tenant!r}" in decision.reason)


def ask_approval(cp, agent: str, person: str) -> tuple[pb.StartRunResponse, str]:
    run = cp.start_run(agent, person=person)
    assert run.run_token, run.decision
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(SUBNET)
    asked = cp.stub().Check(req, timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return run, asked.decision_id


def act(cp, run: pb.StartRunResponse, person: str, what: str = "resume") -> pb.CheckResponse:
    request = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act=what, person=person)
    return cp.stub().RecordAct(request, timeout=5).decision


# -- StartRun: operator ----------------------------------------------------------------------------


def test_starting_a_run_needs_the_person_to_be_an_operator_of_its_tenant(cp):
    # the driver vouches for anyone (persons: any); the tenant's roles decide who may start
    assert cp.start_run("recon", person="bob").decision.verdict == pb.VERDICT_ALLOW  # operator of acme
    assert cp.start_run("recon", person="alice").decision.verdict == pb.VERDICT_ALLOW  # admin of acme
    assert cp.start_run("scout", person="dave").decision.verdict == pb.VERDICT_ALLOW  # operator of globex
    for agent, person, tenant in (("scout", "alice", "globex"), ("scout", "bob", "globex"),
                                  ("scout", "frank", "globex"), ("recon", "frank", "acme")):
        got = cp.start_run(agent, person=person)
        assert refused_for_role(got.decision, person, "operator", tenant), got.decision
        assert not got.run_token and not got.run_id
        record = cp.records()[-1]
        assert (record["action"], record["code"], record["accountable_person"], record["tenant"], record["caller"]) \
            == ("start_run", "role_required", person, tenant, "driver")


def test_an_approver_who_is_not_an_operator_cannot_start_a_run(cp):
    got = cp.start_run("scout", person="erin")  # erin approves in globex, and nothing else
    assert refused_for_role(got.decision, "erin", "operator", "globex") and not got.run_token
    record = cp.records()[-1]
    assert (record["code"], record["accountable_person"], record["rule"]) == ("role_required", "erin", "role:operator")
    assert "erin" in record["reason"]
    # her own credential (the people principal may start agent-less runs as the caller) changes nothing
    own = cp.start_run("", person="erin", token=as_("erin"), tenant="globex")
    assert refused_for_role(own.decision, "erin", "operator", "globex")
    assert cp.records()[-1]["caller"] == "erin"


# -- RecordAct: operator -------------------------------------------------------------------------


def test_a_recorded_act_needs_an_operator_of_the_runs_tenant(cp):
    run = cp.start_run("scout", person="dave")
    assert act(cp, run, "dave").code == "recorded"
    assert act(cp, run, "carol", "cancel").code == "recorded"  # carol operates globex too
    for person, what in (("erin", "resume"), ("frank", "amend"), ("bob", "cancel"), ("alice", "resume")):
        got = act(cp, run, person, what)
        assert refused_for_role(got, person, "operator", "globex"), got
        record = cp.records()[-1]
        assert (record["run_id"], record["action"], record["code"]) == (run.run_id, what, "role_required")
        assert record["arguments"]["person"] == person
    assert [r["code"] for r in cp.records() if r["run_id"] == run.run_id] == [
        "allowed", "recorded", "recorded", "role_required", "role_required", "role_required", "role_required"]


# -- Approve and Reject: approver ----------------------------------------------------------------


def test_approving_needs_an_approver_of_the_runs_tenant(cp):
    run, asked = ask_approval(cp, "scout", "dave")
    request = pb.ApproveRequest(run_id=run.run_id, decision_id=asked)
    # dave operates globex and his principal may approve (own runs too): the tenant says no
    for person in ("dave", "carol", "frank", "alice", "bob"):
        got = cp.stub(as_(person)).Approve(request, timeout=5)
        assert refused_for_role(got.decision, person, "approver", "globex"), got.decision
        assert not got.approval_token
        record = cp.records()[-1]
        assert (record["caller"], record["action"], record["code"], record["run_id"]) == \
            (person, "approval", "role_required", run.run_id)
    rejected = cp.stub(as_("dave")).Reject(pb.RejectRequest(run_id=run.run_id, decision_id=asked), timeout=5)
    assert refused_for_role(rejected.decision, "dave", "approver", "globex")
    assert cp.records()[-1]["action"] == "rejection"
    ok = cp.stub(as_("erin")).Approve(request, timeout=5)
    assert ok.decision.code == "approved" and ok.approval_token


def test_an_operator_who_is_not_an_approver_cannot_approve_and_the_principal_still_counts(cp, policy_dir):
    run, asked = ask_approval(cp, "scout", "dave")
    request = pb.ApproveRequest(run_id=run.run_id, decision_id=asked)
    got = cp.stub(as_("dave")).Approve(request, timeout=5)
    assert refused_for_role(got.decision, "dave", "approver", "globex")
    # both must agree: erin holds the role, but a principal without approve rights still refuses
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace('rules: ["*"]', "rules: [refund-writes-need-approval]"))
    assert cp.server.store.reload()
    barred = cp.stub(as_("erin")).Approve(request, timeout=5)
    assert (barred.decision.code, barred.approval_token) == ("caller_not_permitted", "")


# -- WatchDecisions: auditor ---------------------------------------------------------------------


def _tenants_read(cp, person: str) -> set[str | None]:
    stream = cp.stub(as_(person)).WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5)
    return {r.record.tenant or None for r in stream}


def test_the_decision_stream_reads_only_the_tenants_where_the_caller_is_an_auditor(cp):
    cp.start_run("recon", person="bob")
    cp.start_run("scout", person="dave")
    cp.start_run("", person="zed", tenant="initech")
    garbage = pb.CheckRequest(run=pb.RunContext(run_token="garbage"), tool_call=pb.ToolCall(tool="get_task"))
    assert cp.stub().Check(garbage, timeout=5).code == "run_token_invalid"  # a record naming no tenant
    assert {r["tenant"] for r in cp.records()} == {"acme", "globex", "initech", None}
    # initech declares no roles: the people principal's audit right alone lets its persons read it
    assert _tenants_read(cp, "frank") == {"globex", "initech"}  # auditor of globex only
    assert _tenants_read(cp, "carol") == {"acme", "initech"}  # auditor of acme, operator of globex
    assert _tenants_read(cp, "alice") == {"acme", "initech"}  # admin of acme: every role there
    # the whole log, the records that name no tenant included, only for the `*` process principal
    assert _tenants_read(cp, "siem") == {"acme", "globex", "initech", None}


def test_a_person_who_audits_none_of_their_principals_tenants_is_refused(cp, policy_dir):
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace("audit:\n  tenants: [acme, globex, initech]",
                                                 "audit:\n  tenants: [acme, globex]"))
    assert cp.server.store.reload()
    with pytest.raises(grpc.RpcError) as err:
        _tenants_read(cp, "erin")  # approves in globex, audits nothing
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "role_required" in err.value.details() and "'erin'" in err.value.details()


# -- the Roles RPC ---------------------------------------------------------------------------------


def _roles(cp, person: str, token: str = TOKEN) -> dict[str, tuple[list[str], bool]]:
    got = cp.stub(token).Roles(pb.RolesRequest(person=person), timeout=5)
    assert got.person == person and got.policy_revision
    return {t.tenant: (list(t.roles), t.roles_declared) for t in got.tenants}


def test_the_roles_rpc_answers_a_persons_roles_per_tenant(cp):
    undeclared = (["approver", "operator", "auditor"], False)  # every role but admin
    assert _roles(cp, "alice") == {"acme": (["admin", "approver", "operator", "auditor"], True),
                                   "default": undeclared, "initech": undeclared}
    assert _roles(cp, "carol") == {"acme": (["approver", "operator", "auditor"], True),
                                   "globex": (["operator"], True), "default": undeclared, "initech": undeclared}
    assert _roles(cp, "erin")["globex"] == (["approver"], True) and "acme" not in _roles(cp, "erin")
    # a person asks their own roles with their own credential (persons: self)
    assert _roles(cp, "dave", as_("dave"))["globex"] == (["operator"], True)
    assert cp.records() == []  # a read: nothing recorded


def test_the_roles_rpc_refuses_a_caller_that_may_not_vouch_for_the_person(cp, start):
    for token, person in ((as_("dave"), "carol"), (as_("siem"), "siem"), (as_("carol"), "Carol")):
        with pytest.raises(grpc.RpcError) as err:
            cp.stub(token).Roles(pb.RolesRequest(person=person), timeout=5)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "caller_not_permitted" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        cp.stub().Roles(pb.RolesRequest(person=""), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    unknown = start(auth=AuthPolicy(tokens={digest(TOKEN): "driver"}))
    with pytest.raises(grpc.RpcError) as err:  # no valid credential at all
        unknown.stub("not-a-token-0123456789").Roles(pb.RolesRequest(person="bob"), timeout=5)
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


# -- attacks ---------------------------------------------------------------------------------------

SPELLINGS = ["Bob", "BOB", " bob", "bob ", "bob\u200b", "b\u043eb", "\uff42\uff4f\uff42", "token:bob", "bob@acme"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_another_spelling_of_a_persons_name_holds_none_of_their_roles(cp, spelling):
    got = cp.start_run("recon", person=spelling)  # the driver may vouch for any name it likes
    assert (got.decision.verdict, got.decision.code) == (pb.VERDICT_DENY, "role_required") and not got.run_token
    assert cp.records()[-1]["accountable_person"] == spelling
    assert "acme" not in _roles(cp, spelling)
    run = cp.start_run("recon", person="bob")
    assert act(cp, run, spelling).code == "role_required"


def test_a_credential_spelled_like_an_approver_is_not_that_approver(cp):
    run, asked = ask_approval(cp, "recon", "bob")
    got = cp.stub(as_("Carol")).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked), timeout=5)
    assert refused_for_role(got.decision, "Carol", "approver", "acme") and not got.approval_token
    assert "acme" not in _tenants_read(cp, "Carol")  # not carol's acme records


def test_a_person_named_in_another_tenants_roles_holds_nothing_here(cp):
    # dave operates globex: in acme he may not start, act, approve, or read
    assert refused_for_role(cp.start_run("recon", person="dave").decision, "dave", "operator", "acme")
    run, asked = ask_approval(cp, "recon", "bob")
    assert refused_for_role(act(cp, run, "dave", "cancel"), "dave", "operator", "acme")
    erin = cp.stub(as_("erin")).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked), timeout=5)
    assert refused_for_role(erin.decision, "erin", "approver", "acme")
    assert "acme" not in _tenants_read(cp, "frank")


def test_a_tenant_without_roles_is_left_to_the_principals_and_has_no_admin(cp):
    # anyone the driver vouches for may start and act on initech's runs; nobody is its admin
    run = cp.start_run("", person="zed", tenant="initech")
    assert run.decision.verdict == pb.VERDICT_ALLOW
    assert act(cp, run, "zed").code == "recorded"
    assert _roles(cp, "zed") == {"default": (["approver", "operator", "auditor"], False),
                                 "initech": (["approver", "operator", "auditor"], False)}
    # with its own credential, a person whose principal lacks the tenant is still refused
    assert cp.start_run("", person="zed", token=as_("zed"), tenant="default").decision.code == "caller_not_permitted"


def test_a_delegation_into_another_tenant_needs_an_operator_there(cp, policy_dir):
    recon = policy_dir / "agents" / "recon.yaml"
    recon.write_text(recon.read_text().replace("delegates: [triage]", "delegates: [triage, scout]"))
    acme = policy_dir / "tenants" / "acme.yaml"  # a wider recon goes live without review (docs/catalog.md)
    acme.write_text(acme.read_text().replace("review_changes: true", "review_changes: false"))
    assert cp.server.store.reload()

    def delegate(person: str, agent: str) -> pb.CheckResponse:
        parent = cp.start_run("recon", person=person)
        assert parent.run_token, parent.decision
        req = pb.CheckRequest(run=pb.RunContext(run_token=parent.run_token), delegation=pb.Delegation(agent=agent))
        return cp.stub().Check(req, timeout=5)

    assert delegate("alice", "triage").verdict == pb.VERDICT_ALLOW  # same tenant: alice operates acme
    into = delegate("alice", "scout")  # alice holds no role in globex
    assert refused_for_role(into, "alice", "operator", "globex") and not into.child_run_token
    record = cp.records()[-1]
    assert (record["action"], record["code"], record["accountable_person"]) == ("delegation", "role_required", "alice")
    allowed = delegate("carol", "scout")  # carol operates both tenants
    assert allowed.verdict == pb.VERDICT_ALLOW and allowed.child_run_token


# -- the policy check and the helpers ----------------------------------------------------------------


def test_policy_check_warns_about_a_tenant_without_roles_and_a_persons_whole_log(policy_dir):
    write_tenants(policy_dir)
    shipped = [w for w in warnings(load_policy_dir(policy_dir)) if "roles" in w]
    assert len(shipped) == 1 and shipped[0].startswith("tenant 'initech': declares no roles")
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace("audit:\n  tenants: [acme, globex, initech]",
                                                 'audit:\n  tenants: ["*"]'))
    (policy_dir / "agents" / "idle-default.yaml").write_text(
        "kind: Agent\nname: idle-default\ntenant: default\npersona: nothing\n")
    found = warnings(load_policy_dir(policy_dir))
    assert any(w.startswith("principal 'people': audit ['*'] with an identity pattern") for w in found)
    assert not any(w.startswith("principal 'siem'") for w in found)  # an exact identity: a process
    assert any(w.startswith("tenant 'default': declares no roles") for w in found)  # an agent is in it now


def test_role_helpers_name_the_person_the_role_and_the_tenant(policy_dir):
    write_tenants(policy_dir)
    tenants = load_policy_dir(policy_dir).tenants
    assert role_refusal(tenants, "globex", "dave", "operator") is None
    assert role_refusal(tenants, "globex", "dave", "approver") == "person 'dave' is not an approver of tenant 'globex'"
    assert role_refusal(tenants, "nowhere", "dave", "operator") is not None  # an unknown tenant: no roles at all
    assert roles_by_tenant(tenants, "frank")["globex"] == ["auditor"]
    assert auditor_tenants(tenants, "frank", ["acme", "globex", "initech"]) == ["globex", "initech"]


def test_an_open_decision_stream_stops_reading_a_tenant_when_its_auditor_is_removed(cp, policy_dir):
    """The scope was asked once, when the stream opened: frank, taken off globex's auditors,
    kept receiving every new globex record for as long as his stream stayed open."""
    import threading

    got: list[tuple[str, str]] = []
    seen = threading.Condition()
    stream = cp.stub(as_("frank")).WatchDecisions(pb.WatchDecisionsRequest(after_seq=0), timeout=30)

    def consume() -> None:
        try:
            for r in stream:
                with seen:
                    got.append((r.record.tenant, r.record.run_id))
                    seen.notify_all()
        except grpc.RpcError:
            pass

    def wait_for(run_id: str) -> None:
        with seen:
            assert seen.wait_for(lambda: any(run == run_id for _, run in got), timeout=10), (run_id, got)

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    before = cp.start_run("scout", person="dave")
    wait_for(before.run_id)  # the stream reads globex while frank audits it
    tenant = policy_dir / "tenants" / "globex.yaml"
    tenant.write_text(GLOBEX.replace("auditor: [frank]", "auditor: [erin]"))
    assert cp.server.store.reload()
    after = cp.start_run("scout", person="dave")
    marker = cp.start_run("", person="zed", tenant="initech")  # initech he still reads
    wait_for(marker.run_id)
    stream.cancel()
    reader.join(timeout=10)
    assert after.run_id and not [t for t, run in got if run == after.run_id]
    assert [t for t, run in got if run == marker.run_id] == ["initech"]


def test_a_reload_between_a_streams_scope_and_its_first_record_is_not_missed(cp, policy_dir):
    """The scope is worked out when the stream opens; a reload that lands before the stream's first
    record must narrow it too, not only the reloads after that."""
    import threading

    cp.start_run("scout", person="dave")  # a globex record for the stream to offer
    tenants = cp.server.service.stream.watch_tenants("token:frank")  # asked under the old set
    assert tenants is not None and "globex" in tenants
    (policy_dir / "tenants" / "globex.yaml").write_text(GLOBEX.replace("auditor: [frank]", "auditor: [erin]"))
    assert cp.server.store.reload()
    marker = cp.start_run("", person="zed", tenant="initech")  # initech he still reads
    stop = threading.Event()
    stream = cp.server.service.stream.watch(pb.WatchDecisionsRequest(after_seq=0), stop, tenants, "token:frank")
    got = []
    for response in stream:  # the stored records, then it would follow: stop at the marker
        got.append(response.record.tenant)
        if response.record.run_id == marker.run_id:
            break
    stop.set()
    assert got[-1] == "initech" and "globex" not in got
