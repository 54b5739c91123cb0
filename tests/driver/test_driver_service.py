"""DriverService over gRPC: operator credentials, the person recorded, health and reflection."""

from __future__ import annotations

import hashlib

import grpc
import pytest
import yaml
from driver_harness import PLAN, call, final
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from driver.goal import parse_goal
from driver.service import create_server, goal_to_proto
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc

TOKEN = "bob-secret-token-0123456789"
GOAL = parse_goal({"objective": "scan the lab subnet", "criteria": [
    {"id": "scan", "description": "scan created", "check": {"kind": "receipt_ok", "tool": "create_task_from_template"}},
    {"id": "reported", "description": "reported"}]})


@pytest.fixture()
def service(stack):
    d = stack.driver()
    running, port = create_server("127.0.0.1:0", d, {hashlib.sha256(TOKEN.encode()).digest(): "bob"})
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    yield pb_grpc.DriverServiceStub(channel), channel, d
    channel.close()
    running.stop(0)


def md(token=TOKEN):
    return [("authorization", f"Bearer {token}")]


def watch_until(stub, run_id, kinds):
    seen = []
    for resp in stub.WatchRun(pb.WatchRunRequest(run_id=run_id), metadata=md(), timeout=60):
        seen.append(resp.event.kind)
        if resp.event.kind in kinds:
            break
    return seen


def test_every_action_needs_an_operator_credential(service):
    stub, _, _ = service
    for method, req in (("StartRun", pb.StartRunRequest(agent="recon")), ("ListRuns", pb.ListRunsRequest()),
                        ("ApproveCall", pb.ApproveCallRequest(approval_id="x"))):
        for metadata in ([], md("wrong-token-wrong-token")):
            with pytest.raises(grpc.RpcError) as err:
                getattr(stub, method)(req, metadata=metadata)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "unauthenticated" in err.value.details()


def test_start_approve_and_finish_over_grpc_records_the_person(service, stack):
    stub, _, d = service
    script = yaml.safe_dump({"responses": [PLAN, call("create_task_from_template", template="web",
                                                      target="10.20.0.0/24"), final(reported="ok")]})
    run = stub.StartRun(pb.StartRunRequest(agent="recon", goal=goal_to_proto(GOAL), provider="scripted",
                                           script_yaml=script), metadata=md()).run
    assert run.owner == "bob" and run.agent_version
    watch_until(stub, run.run_id, {"approval_requested"})
    got = stub.GetRun(pb.GetRunRequest(run_id=run.run_id), metadata=md()).run
    assert got.status == pb.RUN_STATUS_AWAITING_APPROVAL
    [approval] = got.pending_approvals
    unsigned = pb.ApproveCallRequest(approval_id=approval.approval_id, note="ok")
    with pytest.raises(grpc.RpcError) as err:  # the driver cannot approve by itself
        stub.ApproveCall(unsigned, metadata=md())
    assert "approval_token_required" in err.value.details()
    stub.ApproveCall(pb.ApproveCallRequest(approval_id=approval.approval_id, note="ok",
                                           approval_token=stack.approval_token(d, approval.approval_id)), metadata=md())
    seen = watch_until(stub, run.run_id, {"run_succeeded", "run_paused"})
    assert seen[-1] == "run_succeeded"
    assert d.store.approval(approval.approval_id).decided_by == "bob"
    d.wait(run.run_id)  # the final event is written just before the final status
    listed = stub.ListRuns(pb.ListRunsRequest(status=pb.RUN_STATUS_SUCCEEDED), metadata=md()).runs
    assert [r.run_id for r in listed] == [run.run_id]


def test_errors_carry_stable_codes(service):
    stub, _, _ = service
    with pytest.raises(grpc.RpcError) as err:
        stub.GetRun(pb.GetRunRequest(run_id="run-nope"), metadata=md())
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "run_not_found" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.StartRun(pb.StartRunRequest(agent="recon", goal=pb.Goal(objective="x"), provider="scripted",
                                         script_yaml="responses: []"), metadata=md())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "invalid_goal" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.ResumeRun(pb.ResumeRunRequest(run_id="run-nope", raise_budget=cp.Budget(turns=3)), metadata=md())
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_health_and_reflection_are_open(service):
    _, channel, _ = service
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="warden.driver.v1.DriverService"))
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    [resp] = list(refl.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")])))
    names = {s.name for s in resp.list_services_response.service}
    assert "warden.driver.v1.DriverService" in names
