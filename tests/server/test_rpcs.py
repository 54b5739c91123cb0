"""Each RPC against a real server on port 0, and the records it leaves in the decision log."""

from __future__ import annotations

import hashlib

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from checkpoint.server.app import RELOAD_HEALTH_NAME
from checkpoint.server.grpc_api import SERVICE_NAME
from warden import grants
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import LOOKUP_ARGS, rpc_error, tool_call

REFUND_ARGS = {
    "invoice_id": "inv-7",
    "payment_id": "pay_9",
    "customer": "customer:bob",
    "amount_usd": 40,
    "reason": "charged twice, says the customer",
    "card_number": "4111111111111111",
}


def test_health_serving_once_policies_are_loaded(checkpoint):
    health = health_pb2_grpc.HealthStub(checkpoint.tcp(token=None))  # probes carry no token
    for name in ("", SERVICE_NAME, RELOAD_HEALTH_NAME):
        got = health.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
        assert got.status == health_pb2.HealthCheckResponse.SERVING, name


def test_not_serving_and_unavailable_while_no_policy_set_loads(start, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "agent.yaml").write_text("kind: Agent\nname: x\nnot_a_key: 1\n")
    running = start(policy_dir=broken)
    health = health_pb2_grpc.HealthStub(running.tcp(token=None))
    got = health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert got.status == health_pb2.HealthCheckResponse.NOT_SERVING
    code, detail = rpc_error(running.stub().Check, tool_call("recon", "v", "get_task", {}))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert detail is not None and detail.code == "policy_error"
    assert running.server.store.status.errors and all(":" in e for e in running.server.store.status.errors)


def test_reflection_lists_the_service_and_resolves_its_file(checkpoint):
    stub = reflection_pb2_grpc.ServerReflectionStub(checkpoint.tcp(token=None))
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME),
    ]
    listed, described = list(stub.ServerReflectionInfo(iter(requests), timeout=5))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names
    assert described.file_descriptor_response.file_descriptor_proto


def test_allow_carries_a_grant_that_verifies_for_exactly_this_call(checkpoint):
    version = checkpoint.version("recon")
    args = {"task_id": "task-1"}
    started = checkpoint.start_run("recon", version)
    req = tool_call("recon", version, "get_task", args)
    req.run.CopyFrom(pb.RunContext(run_token=started.run_token))
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW, resp
    assert resp.decision_id and resp.decided_at.seconds > 0
    assert resp.policy_revision == checkpoint.server.store.current.revision
    grant = resp.grant
    assert grant.decision_id == resp.decision_id and grant.tool == "get_task"
    assert grant.run_id == started.run_id  # the minted run
    grants.verify(
        checkpoint.key, grant, run_id=started.run_id, agent_version=version, tool="get_task", arguments=args
    )
    with pytest.raises(grants.GrantError) as exc:
        grants.verify(
            checkpoint.key,
            grant,
            run_id=started.run_id,
            agent_version=version,
            tool="get_task",
            arguments={"task_id": "task-2"},
        )
    assert exc.value.code == "grant_mismatch"
    start, record = checkpoint.records()
    assert (start["action"], start["run_id"]) == ("start_run", started.run_id)
    assert record["decision_id"] == resp.decision_id and record["run_id"] == started.run_id
    assert record["verdict"] == "ALLOW" and record["code"] == "allowed"
    assert record["accountable_person"] == "alice" and record["agent"] == "recon"
    assert record["arguments"] == args and record["latency_us"] >= 0
    assert record["policy_revision"] == resp.policy_revision


def test_deny_is_an_answer_without_grant_and_is_recorded(checkpoint):
    version = checkpoint.version("refunds")
    resp = checkpoint.stub().Check(
        checkpoint.with_run(tool_call("refunds", version, "get_task", {"task_id": "task-t"})), timeout=5
    )
    assert resp.verdict == pb.VERDICT_DENY and resp.code == "tool_not_allowed"
    assert not resp.HasField("grant")
    start, record = checkpoint.records()
    assert start["action"] == "start_run" and record["run_id"] == start["run_id"]
    assert (record["decision_id"], record["verdict"], record["code"]) == (
        resp.decision_id,
        "DENY",
        "tool_not_allowed",
    )


def test_logged_arguments_are_masked_by_the_tool_policy(checkpoint):
    version = checkpoint.version("refunds")
    resp = checkpoint.stub().Check(
        checkpoint.with_run(tool_call("refunds", version, "propose_refund", REFUND_ARGS)), timeout=5
    )
    assert resp.verdict == pb.VERDICT_REQUIRE_APPROVAL, resp
    assert not resp.HasField("grant")  # only an ALLOW carries a grant
    start, record = checkpoint.records()
    assert start["action"] == "start_run" and record["decision_id"] == resp.decision_id
    logged = record["arguments"]
    assert "reason" not in logged  # dropped
    # a keyed digest: a card number cannot be brute-forced back from the log without the key
    assert logged["card_number"].startswith("hmac-sha256:") and "4111" not in str(logged)
    assert hashlib.sha256(REFUND_ARGS["card_number"].encode()).hexdigest() not in logged["card_number"]
    assert logged["invoice_id"] == "inv-7"


def test_decision_ids_are_unique_and_time_ordered(checkpoint):
    stub = checkpoint.stub()
    version = checkpoint.version("recon")
    run = checkpoint.with_run(tool_call("recon", version, "get_task", {})).run  # one run, many calls
    answers = []
    for i in range(50):
        req = tool_call("recon", version, "get_task", {"task_id": f"task-{i}"})
        req.run.CopyFrom(run)
        answers.append(stub.Check(req, timeout=5))
    assert {a.verdict for a in answers} == {pb.VERDICT_ALLOW}
    ids = [a.decision_id for a in answers]
    assert len(set(ids)) == 50
    assert ids == sorted(ids)


def test_invalid_request_is_invalid_argument_with_code_and_recorded(checkpoint):
    # The run context comes from the run token now, so its shape cannot be wrong; a request
    # with no run context at all still is.
    req = tool_call("recon", "v", "get_task", {"task_id": "task-t"})
    req.ClearField("run")
    code, detail = rpc_error(checkpoint.stub().Check, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail is not None and detail.code and detail.field.startswith("run")
    [record] = checkpoint.records()
    assert record["verdict"] == "DENY" and record["code"] == detail.code and record["tool"] == "get_task"


def test_malformed_bytes_are_invalid_request(checkpoint):
    channel = checkpoint.tcp()
    raw = channel.unary_unary(f"/{SERVICE_NAME}/Check", request_serializer=None, response_deserializer=None)
    code, detail = rpc_error(raw, b"\x0a\xff\xff\xff\xff\x0f")  # field 1, a length past the end
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert detail is not None and detail.code == "invalid_request"
    [record] = checkpoint.records()
    assert (record["action"], record["verdict"], record["code"]) == ("none", "DENY", "invalid_request")


def test_a_request_naming_no_action_is_refused_and_recorded(checkpoint):
    req = tool_call("recon", "v", "get_task", {"task_id": "task-t"})
    req.ClearField("tool_call")
    code, detail = rpc_error(checkpoint.stub().Check, req)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and detail is not None and detail.field == "action"
    [record] = checkpoint.records()
    # recorded, but under no run: a run context nobody vouched for never files a record in a run
    assert (record["action"], record["code"], record["run_id"]) == ("none", "invalid_request", None)
    assert not record["actor_chain"] and f"claimed run {req.run.run_id!r}" in record["reason"]


def test_oversize_request_is_refused(start):
    running = start(max_request_bytes=64 * 1024)
    req = tool_call("recon", running.version("recon"), "get_task", {"task_id": "x" * 100_000})
    code, _ = rpc_error(running.stub().Check, req)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert running.records() == []


def test_check_batch_answers_each_item_by_correlation_id(checkpoint):
    version = checkpoint.version("recon")
    invalid = tool_call("recon", version, "get_task", {"task_id": "task-t"})
    invalid.ClearField("run")
    first = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    third = tool_call("recon", version, "cancel_task", {"task_id": "task-t"})
    third.run.CopyFrom(first.run)  # the same run
    batch = pb.CheckBatchRequest(
        items=[
            pb.CheckBatchItem(correlation_id="a", request=first),
            pb.CheckBatchItem(correlation_id="b", request=invalid),
            pb.CheckBatchItem(correlation_id="c", request=third),
        ]
    )
    out = checkpoint.stub().CheckBatch(batch, timeout=5)
    by_id = {r.correlation_id: r for r in out.results}
    assert list(by_id) == ["a", "b", "c"]
    assert by_id["a"].response.verdict == pb.VERDICT_ALLOW and by_id["a"].response.HasField("grant")
    assert by_id["b"].WhichOneof("outcome") == "error" and by_id["b"].error.code
    assert by_id["c"].response.verdict == pb.VERDICT_DENY
    start, *checks = checkpoint.records()
    assert start["action"] == "start_run"
    assert len(checks) == 3  # the invalid item is recorded too
    assert [r["code"] for r in checks] == ["allowed", by_id["b"].error.code, by_id["c"].response.code]


def test_check_batch_too_large(start):
    running = start()
    running.server.service.max_batch_items = 2
    item = pb.CheckBatchItem(correlation_id="x", request=tool_call("recon", "v", "get_task", {}))
    code, detail = rpc_error(running.stub().CheckBatch, pb.CheckBatchRequest(items=[item] * 3))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and detail.code == "batch_too_large"


def test_check_plan_checks_every_step(checkpoint):
    version = checkpoint.version("recon")
    plan = pb.Plan(steps=[pb.PlanStep(id="s1", tool="get_task"), pb.PlanStep(id="s2", tool="cancel_task")])
    req = pb.CheckPlanRequest(
        run=checkpoint.with_run(tool_call("recon", version, "get_task", {})).run, plan=plan
    )
    out = checkpoint.stub().CheckPlan(req, timeout=5).decision
    assert out.verdict == pb.VERDICT_DENY and out.decision_id
    assert [s.step_id for s in out.plan_steps] == ["s1", "s2"]
    assert out.plan_steps[1].verdict == pb.VERDICT_DENY
    assert not out.HasField("grant")
    start, record = checkpoint.records()
    assert start["action"] == "start_run" and record["run_id"] == start["run_id"]
    assert record["action"] == "plan" and record["arguments"]["steps"][1]["tool"] == "cancel_task"


def test_resolve_agent_current_and_unknown(checkpoint):
    stub = checkpoint.stub()
    got = stub.ResolveAgent(pb.ResolveAgentRequest(agent="refunds"), timeout=5)
    assert got.agent_version == checkpoint.version("refunds")
    assert set(got.tools) == {"lookup_order", "read_invoice", "propose_refund"}
    assert got.policy_revision == checkpoint.server.store.current.revision
    code, detail = rpc_error(stub.ResolveAgent, pb.ResolveAgentRequest(agent="nobody"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and detail.code == "unknown_agent"


def test_audit_unavailable_denies_without_grant(checkpoint):
    version = checkpoint.version("recon")
    req = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))  # an ALLOW
    checkpoint.server.log.close()  # the log can no longer take records
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_DENY and resp.code == "audit_unavailable"
    assert not resp.HasField("grant") and resp.decision_id
    assert checkpoint.server.service.metrics.audit_failures._value.get() == 1


def test_lookup_order_allow_binds_run_and_arguments(checkpoint):
    version = checkpoint.version("refunds")
    started = checkpoint.start_run("refunds", version)
    req = tool_call("refunds", version, "lookup_order", LOOKUP_ARGS)
    req.run.CopyFrom(pb.RunContext(run_token=started.run_token))
    resp = checkpoint.stub().Check(req, timeout=5)
    assert resp.verdict == pb.VERDICT_ALLOW
    grants.verify(
        checkpoint.key, resp.grant, run_id=started.run_id, agent_version=version, tool="lookup_order",
        arguments=LOOKUP_ARGS,
    )  # fmt: skip
    with pytest.raises(grants.GrantError) as exc:
        grants.verify(
            checkpoint.key,
            resp.grant,
            run_id="r-other",
            agent_version=version,
            tool="lookup_order",
            arguments=LOOKUP_ARGS,
        )
    assert exc.value.code == "grant_mismatch"


def test_model_calls_and_delegations_are_recorded_without_grants(checkpoint):
    version = checkpoint.version("recon")
    run = checkpoint.with_run(tool_call("recon", version, "get_task", {})).run
    stub = checkpoint.stub()
    model = stub.Check(
        pb.CheckRequest(
            run=run, model_call=pb.ModelCall(provider="anthropic", model="claude-haiku-4-5", max_tokens=100)
        ),
        timeout=5,
    )
    assert model.verdict == pb.VERDICT_ALLOW, model
    assert not model.HasField("grant")  # grants are for tool calls only
    delegation = stub.Check(pb.CheckRequest(run=run, delegation=pb.Delegation(agent="triage")), timeout=5)
    assert delegation.decision_id
    start, *records = checkpoint.records()
    assert start["action"] == "start_run"
    assert [r["action"] for r in records] == ["model_call", "delegation"]
    assert {r["run_id"] for r in records} == {start["run_id"]}
    assert records[0]["arguments"]["model"] == "claude-haiku-4-5" and records[0]["tool"] is None
    assert records[1]["arguments"]["agent"] == "triage"
    assert records[1]["code"] == delegation.code


def test_a_crashing_decision_function_denies_and_is_recorded(checkpoint, monkeypatch):
    import checkpoint.server.service as service_module

    def broken(_policies, _request, **_kwargs):
        raise RuntimeError("engine bug")

    req = checkpoint.with_run(
        tool_call("recon", checkpoint.version("recon"), "get_task", {"task_id": "task-1"})
    )
    monkeypatch.setattr(service_module, "decide", broken)
    resp = checkpoint.stub().Check(req, timeout=5)
    assert (resp.verdict, resp.code) == (pb.VERDICT_DENY, "policy_error") and not resp.HasField("grant")
    _start, record = checkpoint.records()
    assert (record["decision_id"], record["code"]) == (resp.decision_id, "policy_error")
