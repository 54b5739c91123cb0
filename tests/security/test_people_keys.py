"""People's and services' keys at a running checkpoint: added and revoked with `warden keys`,
taken at the next call with no restart; a person's key never passes for a service, a key's roles
only narrow, and a revoked key is refused at once, on the record."""

from __future__ import annotations

import os
from pathlib import Path

import grpc
import pytest
from server.conftest import TOKEN
from server.helpers import rpc_error

from warden.auth import AuthPolicy, KeySource
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

SUBNET = {"template": "web", "target": "10.20.0.0/24"}


def keys_file(tmp_path: Path, text: str = f"driver {TOKEN}\n") -> Path:
    path = tmp_path / "checkpoint.tokens"
    path.write_text(text)
    os.chmod(path, 0o600)
    return path


def add(path: Path, name: str, kind: str, *roles: str, capsys) -> str:
    args = ["keys", "add", name, "--kind", kind, "--tokens", str(path)]
    for role in roles:
        args += ["--role", role]
    assert main(args) == 0
    return capsys.readouterr().out.strip()


def waiting_call(cp) -> tuple[pb.StartRunResponse, str]:
    run = cp.start_run("recon", person="alice")
    assert run.run_token, run.decision
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update(SUBNET)
    asked = cp.stub().Check(req, timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return run, asked.decision_id


@pytest.fixture
def path(tmp_path):
    return keys_file(tmp_path)


@pytest.fixture
def cp(start, path):
    return start(auth=AuthPolicy(keys=KeySource(path)))


def test_a_person_added_while_serving_approves_and_once_revoked_is_refused_at_once(cp, path, capsys):
    run, asked = waiting_call(cp)
    request = pb.ApproveRequest(run_id=run.run_id, decision_id=asked)
    bob = add(path, "bob", "person", "approver", capsys=capsys)  # acme's approver, no restart
    got = cp.stub(bob).Approve(request, timeout=5)
    assert got.decision.code == "approved" and got.approval_token
    assert (cp.records()[-1]["caller"], cp.records()[-1]["principal"]) == ("bob", "people")
    assert main(["keys", "revoke", "bob", "--tokens", str(path)]) == 0
    code, detail = rpc_error(cp.stub(bob).Reject, pb.RejectRequest(run_id=run.run_id, decision_id=asked))
    assert code == grpc.StatusCode.UNAUTHENTICATED and detail.code == "unauthenticated"
    record = cp.records()[-1]
    assert record["code"] == "unauthenticated" and record["caller"] is None
    # the old line of the file still works beside the new keys
    assert cp.start_run("recon", person="alice").run_token


def test_a_persons_key_named_like_a_service_is_not_the_service(start, tmp_path, capsys):
    """A person's key whose name is a service's (`driver`) is `person:driver`: the driver principal
    lists `service:driver`, so the key gets the people principal, which vouches for nobody else."""
    path = keys_file(tmp_path, "")
    impostor = add(path, "driver", "person", capsys=capsys)
    cp = start(auth=AuthPolicy(keys=KeySource(path)))
    got = cp.start_run("recon", person="alice", token=impostor)
    assert got.decision.verdict == pb.VERDICT_DENY and not got.run_token, got.decision
    record = cp.records()[-1]
    assert (record["caller"], record["principal"]) == ("driver", "people")
    # the same name as a service's key is the driver
    (tmp_path / "other").mkdir()
    other = keys_file(tmp_path / "other", "")
    service = add(other, "driver", "service", "check", capsys=capsys)
    real = start(auth=AuthPolicy(keys=KeySource(other)))
    started = real.start_run("recon", person="alice", token=service)
    assert started.run_token and real.records()[-1]["principal"] == "driver"


def test_a_keys_roles_narrow_what_its_principal_may_do(cp, path, capsys):
    run, asked = waiting_call(cp)
    request = pb.ApproveRequest(run_id=run.run_id, decision_id=asked)
    carol = add(path, "carol", "person", "auditor", capsys=capsys)  # acme gives carol approver too
    code, _ = rpc_error(cp.stub(carol).Approve, request)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert cp.records()[-1]["code"] == "unauthenticated"
    assert cp.stub(carol).Roles(pb.RolesRequest(person="carol"), timeout=5) is not None  # reads stay open
    # a service key for asking decisions cannot approve either, whoever its principal is
    ci = add(path, "ci", "service", "check", capsys=capsys)
    code, _ = rpc_error(cp.stub(ci).Approve, request)
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_a_key_file_that_goes_bad_lets_nobody_in_until_it_is_mended(cp, path, capsys):
    bob = add(path, "bob", "person", capsys=capsys)
    assert cp.stub(bob).Roles(pb.RolesRequest(person="bob"), timeout=5) is not None
    good = path.read_text()
    path.write_text(good + "eve sha256:00\n")  # a hand edit gone wrong
    for token in (bob, TOKEN):
        code, _ = rpc_error(cp.stub(token).Roles, pb.RolesRequest(person="bob"))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    path.write_text(good)
    assert cp.stub(bob).Roles(pb.RolesRequest(person="bob"), timeout=5) is not None


def test_the_audit_page_follows_the_key_file_and_the_keys_roles(path, policy_dir, capsys):
    from checkpoint.audit.web.access import Gate

    gate = Gate(path, policy_dir)
    carol = add(path, "carol", "person", "auditor", capsys=capsys)
    bob = add(path, "bob", "person", "approver", capsys=capsys)
    seen = gate.authenticate(f"Bearer {carol}")
    assert seen is not None and (seen.caller, seen.principal, seen.tenants) == ("carol", "people", ["acme"])
    assert gate.authenticate(f"Bearer {bob}") is None  # an approver's key does not read the log
    assert main(["keys", "revoke", "carol", "--tokens", str(path)]) == 0
    assert gate.authenticate(f"Bearer {carol}") is None
