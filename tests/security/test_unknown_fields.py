"""A binary request carrying fields this checkpoint does not know is refused."""

from __future__ import annotations

import grpc
import pytest

from checkpoint.audit import DecisionReader
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import error_detail_of

from .conftest import tool_call

METHOD = "/warden.checkpoint.v1.CheckpointService/Check"


def _inside_run(request: pb.CheckRequest) -> bytes:
    """The same request with field 99 appended inside RunContext (field 1 of CheckRequest)."""
    run = request.run.SerializeToString() + UNKNOWN
    rest = pb.CheckRequest()
    rest.CopyFrom(request)
    rest.ClearField("run")
    return bytes([0x0A]) + _varint(len(run)) + run + rest.SerializeToString()


def _inside_actor(request: pb.CheckRequest) -> bytes:
    actor = request.run.actor_chain[1].SerializeToString() + UNKNOWN
    run = pb.RunContext()
    run.CopyFrom(request.run)
    del run.actor_chain[1]
    run_bytes = run.SerializeToString() + bytes([0x2A]) + _varint(len(actor)) + actor  # actor_chain = 5
    rest = pb.CheckRequest()
    rest.CopyFrom(request)
    rest.ClearField("run")
    return bytes([0x0A]) + _varint(len(run_bytes)) + run_bytes + rest.SerializeToString()


def _varint(n: int) -> bytes:
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


UNKNOWN = _varint(99 << 3 | 0) + _varint(1)  # field 99, wire type varint, value 1


@pytest.fixture
def running(start):
    return start()


def _send(running, data: bytes):
    call = running.tcp().unary_unary(METHOD, request_serializer=None, response_deserializer=None)
    return call(data, timeout=10)


def test_the_crafted_bytes_parse_and_only_differ_by_the_unknown_field(running):
    request = tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"})
    for data in (request.SerializeToString() + UNKNOWN, _inside_run(request), _inside_actor(request)):
        parsed = pb.CheckRequest.FromString(data)
        parsed.DiscardUnknownFields()
        assert parsed == request


def test_the_request_without_unknown_fields_is_decided(running):
    request = running.with_run(tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"}))
    answer = pb.CheckResponse.FromString(_send(running, request.SerializeToString()))
    assert answer.code == "allowed"


@pytest.mark.parametrize("where", ["top-level", "run", "actor"])
def test_an_unknown_field_is_refused_and_recorded(running, where):
    request = tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"})
    data = {"top-level": lambda r: r.SerializeToString() + UNKNOWN,
            "run": _inside_run, "actor": _inside_actor}[where](request)
    with pytest.raises(grpc.RpcError) as info:
        _send(running, data)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = error_detail_of(info.value)
    assert detail is not None and detail.code == "invalid_request"
    expected = {"top-level": "(top level)", "run": "run", "actor": "run.actor_chain[1]"}[where]
    assert f"({expected}: field 99)" in detail.message
    records = [r for r in DecisionReader(running.data / "decisions.db").read() if r["action"] != "catalog"]
    assert [(r["code"], r["action"]) for r in records] == [("invalid_request", "none")]
    assert "does not know" in records[0]["reason"]


def test_an_unknown_field_inside_the_arguments_struct_is_refused(running):
    request = tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"})
    value = request.tool_call.arguments.fields["task_id"].SerializeToString() + UNKNOWN
    entry = bytes([0x0A]) + _varint(7) + b"task_id" + bytes([0x12]) + _varint(len(value)) + value
    struct = bytes([0x0A]) + _varint(len(entry)) + entry
    tc = pb.ToolCall(tool="get_task").SerializeToString() + bytes([0x12]) + _varint(len(struct)) + struct
    rest = pb.CheckRequest()
    rest.CopyFrom(request)
    rest.ClearField("tool_call")
    data = rest.SerializeToString() + bytes([0x12]) + _varint(len(tc)) + tc  # tool_call = 2
    assert pb.CheckRequest.FromString(data).tool_call.arguments["task_id"] == "task-1"
    with pytest.raises(grpc.RpcError) as info:
        _send(running, data)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "tool_call.arguments.fields['task_id']: field 99" in error_detail_of(info.value).message
