"""Roles per tenant on the driver's operator API, against a real checkpoint and toolrunner.

The checkpoint answers each person's roles (its Roles RPC); the driver asks once per RPC. Two
tenants: the shipped `acme` (alice admin; bob and carol operate, approve and audit) and a test
tenant `globex` (dave operates, erin approves, frank audits). One tenant's people cannot see or
touch the other's runs: a run they hold no role for is answered as one that does not exist.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from driver_harness import CHECKPOINT_TOKEN, PLAN, call

from checkpoint.audit import DecisionReader
from driver.access import RPC_ROLES
from driver.clients import CheckpointClient
from driver.errors import DriverError
from driver.goal import parse_goal
from driver.service import create_server, goal_to_proto
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.errors import error_detail_of

PERSONS = ("alice", "bob", "dave", "erin", "frank")
OPERATOR_TOKENS = {p: f"{p}-operator-token-0123456789" for p in PERSONS}  # the driver's operators file
CHECKPOINT_TOKENS = {p: f"{p}-checkpoint-token-0123456789" for p in PERSONS}  # each person's own, for Approve

GLOBEX = "kind: Tenant\nname: globex\nroles:\n  operator: [dave]\n  approver: [erin]\n  auditor: [frank]\n"
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
GOAL = goal_to_proto(parse_goal({"objective": "scan the lab subnet", "criteria": [
    {"id": "reported", "description": "the findings are reported"}]}))
HANDOFF = yaml.safe_dump({"responses": [{"action": "handoff", "reason": "a person decides"}]})
WIDE_SCAN = yaml.safe_dump({"responses": [PLAN, call("create_task_from_template", template="web",
                                                     target="10.20.0.0/24")]})


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


@pytest.fixture()
def checkpoint_server(tmp_path: Path, policy_dir: Path, grant_key) -> Iterator[Any]:
    """The conftest's checkpoint, with globex in the policies and each person's own credential."""
    from checkpoint.server.app import create_server as create_checkpoint
    from warden.auth import AuthPolicy

    (policy_dir / "tenants" / "globex.yaml").write_text(GLOBEX)
    (policy_dir / "agents" / "scout.yaml").write_text(SCOUT)
    # templates are a tenant's own (docs/skills.md): globex's scan uses a reviewed template of globex
    (policy_dir / "templates" / "globex.yaml").write_text(
        "kind: Template\nname: web\ntenant: globex\nspec: {image: 'recon/httpx:1.6', command: [httpx, -u, TARGET]}\n")
    people = policy_dir / "principals" / "people.yaml"
    people.write_text(people.read_text().replace("tenants: [acme]", "tenants: [acme, globex]"))
    tokens = {_digest(CHECKPOINT_TOKEN): "driver", **{_digest(t): p for p, t in CHECKPOINT_TOKENS.items()}}
    server, port = create_checkpoint("127.0.0.1:0", policy_dir=policy_dir, data_dir=tmp_path / "cp", key=grant_key,
                                     auth=AuthPolicy(tokens=tokens), watch_interval=None)
    server.start()
    server.address = f"127.0.0.1:{port}"
    yield server
    server.stop(0)


class Api:
    def __init__(self, stub: pb_grpc.DriverServiceStub, driver: Any) -> None:
        self.stub = stub
        self.driver = driver

    def __call__(self, person: str, method: str, request: Any) -> Any:
        return getattr(self.stub, method)(request, metadata=[("authorization", f"Bearer {OPERATOR_TOKENS[person]}")],
                                          timeout=30)

    def refused(self, person: str, method: str, request: Any) -> tuple[grpc.StatusCode, str, str]:
        with pytest.raises(grpc.RpcError) as err:
            result = self(person, method, request)
            if method == "WatchRun":
                list(result)
        detail = error_detail_of(err.value)
        assert detail is not None
        return err.value.code(), detail.code, detail.message

    def start(self, person: str, agent: str, script: str) -> pb.Run:
        run = self(person, "StartRun", pb.StartRunRequest(agent=agent, goal=GOAL, provider="scripted",
                                                          script_yaml=script)).run
        self.driver.wait(run.run_id)  # its worker stops where a person must act
        return self(person, "GetRun", pb.GetRunRequest(run_id=run.run_id)).run


@pytest.fixture()
def api(stack) -> Iterator[Api]:
    d = stack.driver()
    running, port = create_server("127.0.0.1:0", d, {_digest(t): p for p, t in OPERATOR_TOKENS.items()})
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield Api(pb_grpc.DriverServiceStub(channel), d)
    channel.close()
    running.stop(0)


def _acts(run_id: str) -> list[tuple[str, pb.ResumeRunRequest | pb.CancelRunRequest | pb.AmendGoalRequest]]:
    return [("ResumeRun", pb.ResumeRunRequest(run_id=run_id, reply="go on")),
            ("CancelRun", pb.CancelRunRequest(run_id=run_id, reason="stop")),
            ("AmendGoal", pb.AmendGoalRequest(run_id=run_id, goal=GOAL))]


def _records(stack) -> list[dict[str, Any]]:
    return list(DecisionReader(stack.tmp / "cp" / "decisions.db").read())


def test_every_driver_rpc_names_the_role_it_needs():
    methods = set(pb.DESCRIPTOR.services_by_name["DriverService"].methods_by_name)
    assert methods <= set(RPC_ROLES), f"no role for {sorted(methods - set(RPC_ROLES))} in driver/access.py"


def test_every_rpc_refuses_a_person_without_a_role_in_the_runs_tenant(api):
    """Each DriverService method, the ones added later included, asked by bob (acme only) about
    a globex run and its pending approval: refused, or (ListRuns) blind to it; the run unchanged."""
    run = api.start("dave", "scout", WIDE_SCAN)
    [approval] = run.pending_approvals
    fill = {"run_id": run.run_id, "root_run_id": run.run_id, "approval_id": approval.approval_id,
            "approval_token": "any-token", "agent": "scout", "goal": GOAL, "provider": "scripted",
            "script_yaml": HANDOFF, "no_follow": True}
    service = pb.DESCRIPTOR.services_by_name["DriverService"]
    for method in service.methods:
        request_type = getattr(pb, method.input_type.name)
        request = request_type(**{k: v for k, v in fill.items() if k in request_type.DESCRIPTOR.fields_by_name})
        try:
            answer = api("bob", method.name, request)
            answers = list(answer) if method.server_streaming else [answer]
        except grpc.RpcError as err:
            assert err.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.PERMISSION_DENIED), (method.name, err)
            continue
        assert method.name == "ListRuns", f"{method.name} answered a person with no role in globex: {answers}"
        assert run.run_id not in {r.run_id for r in answers[0].runs}
    after = api("dave", "GetRun", pb.GetRunRequest(run_id=run.run_id)).run
    assert (after.status, [a.status for a in after.pending_approvals]) == (pb.RUN_STATUS_AWAITING_APPROVAL, ["pending"])


def test_an_operator_of_one_tenant_cannot_get_list_watch_resume_or_cancel_another_tenants_run(api):
    acme = api.start("bob", "recon", HANDOFF)
    globex = api.start("dave", "scout", HANDOFF)
    assert (acme.tenant, acme.status, globex.tenant, globex.status) == \
        ("acme", pb.RUN_STATUS_PAUSED, "globex", pb.RUN_STATUS_PAUSED)
    missing = api.refused("dave", "GetRun", pb.GetRunRequest(run_id="run-nope"))
    assert missing == (grpc.StatusCode.NOT_FOUND, "run_not_found", "no run 'run-nope'")
    # bob's run, to dave, is a run that does not exist: the same status, code and words
    for method, request in [("GetRun", pb.GetRunRequest(run_id=acme.run_id)),
                            ("WatchRun", pb.WatchRunRequest(run_id=acme.run_id, no_follow=True)),
                            *_acts(acme.run_id)]:
        assert api.refused("dave", method, request) == \
            (grpc.StatusCode.NOT_FOUND, "run_not_found", f"no run {acme.run_id!r}"), method
    assert [r.run_id for r in api("dave", "ListRuns", pb.ListRunsRequest()).runs] == [globex.run_id]
    assert [r.run_id for r in api("bob", "ListRuns", pb.ListRunsRequest()).runs] == [acme.run_id]
    assert list(api("dave", "ListRuns", pb.ListRunsRequest(root_run_id=acme.run_id)).runs) == []
    # and the other way round
    assert api.refused("bob", "CancelRun", pb.CancelRunRequest(run_id=globex.run_id))[1] == "run_not_found"
    assert api("bob", "GetRun", pb.GetRunRequest(run_id=acme.run_id)).run.status == pb.RUN_STATUS_PAUSED
    assert api("dave", "GetRun", pb.GetRunRequest(run_id=globex.run_id)).run.status == pb.RUN_STATUS_PAUSED
    # alice, acme's admin, sees acme only
    assert [r.run_id for r in api("alice", "ListRuns", pb.ListRunsRequest()).runs] == [acme.run_id]


def test_an_auditor_reads_runs_but_may_not_act_on_them(api, stack):
    run = api.start("dave", "scout", HANDOFF)
    assert api("frank", "GetRun", pb.GetRunRequest(run_id=run.run_id)).run.run_id == run.run_id
    assert [r.run_id for r in api("frank", "ListRuns", pb.ListRunsRequest()).runs] == [run.run_id]
    events = list(api("frank", "WatchRun", pb.WatchRunRequest(run_id=run.run_id, no_follow=True)))
    assert events[0].event.kind == "run_started"
    for method, request in _acts(run.run_id):
        code, detail, message = api.refused("frank", method, request)
        assert (code, detail) == (grpc.StatusCode.PERMISSION_DENIED, "role_required"), method
        assert "'frank'" in message and "operator" in message and "'globex'" in message
    assert api("dave", "GetRun", pb.GetRunRequest(run_id=run.run_id)).run.status == pb.RUN_STATUS_PAUSED
    # an operator may: dave cancels his run
    assert api("dave", "CancelRun", pb.CancelRunRequest(run_id=run.run_id)).run.status == pb.RUN_STATUS_CANCELLED


def test_an_approver_who_is_not_an_operator_cannot_start_a_run(api, stack):
    for person in ("erin", "frank", "bob"):  # approver, auditor of globex; operator of acme only
        code, detail, message = api.refused(person, "StartRun", pb.StartRunRequest(
            agent="scout", goal=GOAL, provider="scripted", script_yaml=HANDOFF))
        assert (code, detail) == (grpc.StatusCode.PERMISSION_DENIED, "role_required")
        assert f"'{person}'" in message and "operator" in message
        record = _records(stack)[-1]  # the checkpoint decided it, and it is on the record
        assert (record["action"], record["code"], record["accountable_person"], record["tenant"]) == \
            ("start_run", "role_required", person, "globex")
    assert list(api("erin", "ListRuns", pb.ListRunsRequest()).runs) == []  # nothing was started


def test_an_operator_who_is_not_an_approver_cannot_approve(api, stack):
    run = api.start("dave", "scout", WIDE_SCAN)
    assert run.status == pb.RUN_STATUS_AWAITING_APPROVAL
    [approval] = run.pending_approvals
    approve = pb.ApproveCallRequest(approval_id=approval.approval_id, approval_token="any-token")
    reject = pb.RejectCallRequest(approval_id=approval.approval_id)
    for person, method, request in (("dave", "ApproveCall", approve), ("dave", "RejectCall", reject),
                                    ("frank", "ApproveCall", approve)):
        code, detail, message = api.refused(person, method, request)
        assert (code, detail) == (grpc.StatusCode.PERMISSION_DENIED, "role_required")
        assert f"'{person}'" in message and "approver" in message
    # an approver of acme is no approver here, and learns nothing of the approval
    assert api.refused("bob", "ApproveCall", approve) == \
        (grpc.StatusCode.NOT_FOUND, "approval_not_found", f"no approval {approval.approval_id!r}")
    # at the checkpoint, dave's own credential is refused too, and recorded
    for person in ("dave", "erin"):
        client = CheckpointClient(stack.checkpoint_address, timeout=5, token=CHECKPOINT_TOKENS[person])
        try:
            got = client.approve(approval.run_id, approval.decision_id, "ok")
        finally:
            client.close()
        if person == "dave":
            assert (got.decision.code, got.approval_token) == ("role_required", "")
            assert _records(stack)[-1]["caller"] == "dave"
        else:
            token = got.approval_token
    assert api.driver.store.approval(approval.approval_id).status == "pending"
    done = api("erin", "ApproveCall", pb.ApproveCallRequest(approval_id=approval.approval_id, approval_token=token))
    assert done.run.run_id == run.run_id
    assert api.driver.store.approval(approval.approval_id).decided_by == "erin"


def test_roles_are_the_checkpoints_answer_on_every_call(api, checkpoint_server, policy_dir):
    run = api.start("dave", "scout", HANDOFF)
    globex = policy_dir / "tenants" / "globex.yaml"
    globex.write_text(GLOBEX.replace("operator: [dave]", "operator: []"))  # dave is no longer anyone
    assert checkpoint_server.store.reload()
    assert api.refused("dave", "GetRun", pb.GetRunRequest(run_id=run.run_id))[1] == "run_not_found"
    assert list(api("dave", "ListRuns", pb.ListRunsRequest()).runs) == []


def test_without_the_checkpoint_nothing_is_read_or_done(stack):
    d = stack.driver(checkpoint="127.0.0.1:1")  # nothing listens there
    running, port = create_server("127.0.0.1:0", d, {_digest(OPERATOR_TOKENS["bob"]): "bob"})
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        with pytest.raises(grpc.RpcError) as err:
            pb_grpc.DriverServiceStub(channel).ListRuns(
                pb.ListRunsRequest(), metadata=[("authorization", f"Bearer {OPERATOR_TOKENS['bob']}")], timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "checkpoint_unavailable" in err.value.details()
    finally:
        channel.close()
        running.stop(0)


def test_the_driver_may_ask_only_for_persons_it_may_vouch_for(stack, checkpoint_server, policy_dir):
    driver_principal = policy_dir / "principals" / "driver.yaml"
    driver_principal.write_text(driver_principal.read_text().replace("persons: any", "persons: [bob]"))
    assert checkpoint_server.store.reload()
    client = CheckpointClient(stack.checkpoint_address, timeout=5, token=CHECKPOINT_TOKEN)
    try:
        assert client.roles("bob")["acme"] == frozenset({"operator", "approver", "auditor"})
        with pytest.raises(DriverError) as err:
            client.roles("dave")
        assert err.value.code == "caller_not_permitted"
    finally:
        client.close()


def test_warden_up_names_a_person_the_shipped_tenant_knows(tmp_path, policy_dir, monkeypatch):
    from warden.datafolder import DEFAULT_PERSON, ensure_operator, operator_name
    from warden.up import roles_note

    monkeypatch.delenv("WARDEN_PERSON", raising=False)
    ensure_operator(tmp_path / "a")
    assert operator_name(tmp_path / "a" / "operators.tokens") == DEFAULT_PERSON == "alice"
    assert roles_note(policy_dir, "alice") is None
    monkeypatch.setenv("WARDEN_PERSON", "root")
    ensure_operator(tmp_path / "b")
    assert operator_name(tmp_path / "b" / "operators.tokens") == "root"
    note = roles_note(policy_dir, "root")  # the OS user of a container: no role anywhere
    assert note is not None and "'root'" in note and "role_required" in note and "--person" in note
    ensure_operator(tmp_path / "c", "bob")
    assert operator_name(tmp_path / "c" / "operators.tokens") == "bob"


def test_an_approver_relays_only_their_own_approval_of_that_very_call(api, stack):
    """The driver's history names who approved (`decided_by`): one approver relaying another's
    approval token, or a token of another call, is refused before it is recorded as theirs."""
    first, second = api.start("bob", "recon", WIDE_SCAN), api.start("bob", "recon", WIDE_SCAN)
    [waiting], [other] = first.pending_approvals, second.pending_approvals

    def own_token(person: str, approval: pb.Approval) -> str:
        client = CheckpointClient(stack.checkpoint_address, timeout=5, token=CHECKPOINT_TOKENS[person])
        try:
            got = client.approve(approval.run_id, approval.decision_id, "ok")
        finally:
            client.close()
        assert got.approval_token, got.decision
        return got.approval_token

    alices = own_token("alice", waiting)  # alice (acme's admin) approved at the checkpoint herself
    bobs_other = own_token("bob", other)  # bob's own approval, of the second run's call
    for token in (alices, bobs_other, "wapv1.not-base64!.sig", "any-token"):
        # before: accepted, and the driver recorded bob as the approver of the first call
        code, detail, message = api.refused("bob", "ApproveCall", pb.ApproveCallRequest(
            approval_id=waiting.approval_id, approval_token=token))
        assert (code, detail) == (grpc.StatusCode.FAILED_PRECONDITION, "approval_invalid"), token
        assert "'bob'" in message and waiting.decision_id in message
    assert api.driver.store.approval(waiting.approval_id).status == "pending"
    assert "approval_decided" not in [e.kind for e in api.driver.store.events(first.run_id)]
    # alice relays her own approval: hers, on the record as hers
    api("alice", "ApproveCall", pb.ApproveCallRequest(approval_id=waiting.approval_id, approval_token=alices))
    assert api.driver.store.approval(waiting.approval_id).decided_by == "alice"


def test_an_approval_token_the_checkpoint_never_signed_is_refused_by_the_driver_itself(api, stack):
    """The driver verifies an approval token with the checkpoint's published keys before it names
    anyone as approver: a token with the right claims (this decision, this run, this person) signed
    by any other key is refused, and so is a real one whose lifetime is over."""
    import base64
    import json

    from warden.token_keys import KeySet
    from warden.tokens import APPROVAL_LABEL, Signer

    first = api.start("bob", "recon", WIDE_SCAN)
    [waiting] = first.pending_approvals
    client = CheckpointClient(stack.checkpoint_address, timeout=5, token=CHECKPOINT_TOKENS["alice"])
    try:
        real = client.approve(waiting.run_id, waiting.decision_id, "ok").approval_token
    finally:
        client.close()
    payload = real.split(".")[2]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims = {k: v for k, v in claims.items() if k not in ("iat", "exp")}
    claims["approver"] = "bob"  # bob never approved: he signs his own approval with a key of his own
    forged = Signer(KeySet(None), APPROVAL_LABEL, 3600).sign(claims)
    stale = Signer(KeySet(None), APPROVAL_LABEL, 3600, clock=lambda: 0.0).sign(claims)
    for token in (forged, stale):
        code, detail, message = api.refused("bob", "ApproveCall", pb.ApproveCallRequest(
            approval_id=waiting.approval_id, approval_token=token))
        assert (code, detail) == (grpc.StatusCode.FAILED_PRECONDITION, "approval_invalid"), message
        assert "not signed by the checkpoint" in message or "expired" in message
    assert api.driver.store.approval(waiting.approval_id).status == "pending"
    assert "approval_decided" not in [e.kind for e in api.driver.store.events(first.run_id)]
