"""CheckStream: many checks over one stream, each decided, recorded before its answer and answered
as a Check is, with its own run token and verdict; an error of one request is its answer, not the
stream's end."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import grpc
import pytest

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import Running
from .helpers import tool_call

DONE = object()


class Stream:
    """A CheckStream whose requests are sent one at a time, so a test can look between them."""

    def __init__(self, stub, **kwargs):
        self._out: queue.Queue = queue.Queue()
        self.answers: Iterator[pb.CheckStreamResponse] = stub.CheckStream(self._requests(), timeout=30, **kwargs)

    def _requests(self) -> Iterator[pb.CheckStreamRequest]:
        while (item := self._out.get()) is not DONE:
            yield item

    def ask(self, correlation_id: str, request: pb.CheckRequest | None) -> pb.CheckStreamResponse:
        item = pb.CheckStreamRequest(correlation_id=correlation_id)
        if request is not None:
            item.request.CopyFrom(request)
        self._out.put(item)
        return next(self.answers)

    def close(self) -> None:
        self._out.put(DONE)


def test_each_request_is_recorded_before_its_answer_and_answered_in_order(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    allowed = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    denied = tool_call("recon", version, "cancel_task", {"task_id": "task-t"})
    denied.run.CopyFrom(allowed.run)
    stream = Stream(checkpoint.stub())
    before = len(checkpoint.records())
    seen = []
    for correlation_id, request in (("a", allowed), ("b", denied), ("c", allowed)):
        answer = stream.ask(correlation_id, request)
        # the answer came: its record is already in the log, and the next request is not sent yet
        records = checkpoint.records()
        assert len(records) == before + len(seen) + 1
        assert records[-1]["decision_id"] == answer.response.decision_id
        seen.append(answer)
    stream.close()
    assert list(stream.answers) == []  # the stream ends when the caller's requests end
    assert [a.correlation_id for a in seen] == ["a", "b", "c"]
    assert seen[0].response.verdict == pb.VERDICT_ALLOW and seen[0].response.HasField("grant")
    assert seen[1].response.verdict == pb.VERDICT_DENY and not seen[1].response.HasField("grant")
    assert seen[2].response.verdict == pb.VERDICT_ALLOW
    assert seen[0].response.grant.decision_id != seen[2].response.grant.decision_id


def test_every_request_carries_its_own_run_token(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    first = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    second = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    stream = Stream(checkpoint.stub())
    one, two = stream.ask("1", first), stream.ask("2", second)
    stream.close()
    records = {r["decision_id"]: r for r in checkpoint.records()}
    assert records[one.response.decision_id]["run_id"] != records[two.response.decision_id]["run_id"]
    forged = tool_call("recon", version, "get_task", {"task_id": "task-t"})
    forged.run.run_token = first.run.run_token[:-4] + "AAAA"
    stream = Stream(checkpoint.stub())
    refused = stream.ask("forged", forged)
    stream.close()
    assert refused.response.verdict == pb.VERDICT_DENY and refused.response.code == "run_token_invalid"


def test_a_request_check_would_refuse_with_an_error_is_that_answer_and_the_stream_goes_on(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    good = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    no_run = tool_call("recon", version, "get_task", {"task_id": "task-t"})
    no_run.ClearField("run")
    stream = Stream(checkpoint.stub())
    empty = stream.ask("empty", None)
    invalid = stream.ask("no-run", no_run)
    after = stream.ask("good", good)
    stream.close()
    assert empty.WhichOneof("outcome") == "error" and empty.error.code == "invalid_request"
    assert empty.error.field == "request"
    assert invalid.correlation_id == "no-run" and invalid.WhichOneof("outcome") == "error"
    assert invalid.error.code == "invalid_request"
    assert after.response.verdict == pb.VERDICT_ALLOW
    # the request Check refused is recorded as a unary Check's refusal would be
    assert [r["code"] for r in checkpoint.records()][-2:] == ["invalid_request", "allowed"]


def test_a_request_with_a_field_this_checkpoint_does_not_know_is_refused_and_recorded(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    good = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    channel = checkpoint.tcp()
    raw = channel.stream_stream("/warden.checkpoint.v1.CheckpointService/CheckStream",
                                request_serializer=lambda b: b,
                                response_deserializer=pb.CheckStreamResponse.FromString)
    unknown = pb.CheckStreamRequest(correlation_id="x", request=good).SerializeToString() + b"\xf8\x07\x01"  # field 127
    answers = list(raw(iter([unknown, pb.CheckStreamRequest(correlation_id="y", request=good).SerializeToString()]),
                       timeout=30))
    assert answers[0].error.code == "invalid_request" and "does not know" in answers[0].error.message
    assert answers[1].correlation_id == "y" and answers[1].response.verdict == pb.VERDICT_ALLOW
    assert checkpoint.records()[-2]["code"] == "invalid_request"


def test_a_stream_without_a_credential_is_refused_once_and_recorded(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    request = tool_call("recon", version, "get_task", {"task_id": "task-t"})
    before = len(checkpoint.records())
    with pytest.raises(grpc.RpcError) as refused:
        list(checkpoint.stub(token=None).CheckStream(
            iter([pb.CheckStreamRequest(correlation_id="a", request=request)] * 3), timeout=30))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    records = checkpoint.records()[before:]
    assert [r["code"] for r in records] == ["unauthenticated"]
    assert "CheckStream" in records[0]["reason"]


def test_streams_beyond_the_limit_are_refused_and_a_closed_one_frees_its_place(start) -> None:
    running = start(max_check_streams=1)
    version = running.version("recon")
    request = running.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    first = Stream(running.stub())
    assert first.ask("1", request).response.verdict == pb.VERDICT_ALLOW
    with pytest.raises(grpc.RpcError) as refused:
        list(running.stub().CheckStream(iter([pb.CheckStreamRequest(correlation_id="2", request=request)]), timeout=30))
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE and "too_many_streams" in refused.value.details()
    first.close()
    assert list(first.answers) == []
    again = None
    for _ in range(100):  # the server lets go of the first stream's place once its handler returns
        try:
            again = list(running.stub().CheckStream(
                iter([pb.CheckStreamRequest(correlation_id="3", request=request)]), timeout=30))
            break
        except grpc.RpcError as exc:
            assert exc.code() == grpc.StatusCode.UNAVAILABLE
            threading.Event().wait(0.05)
    assert again is not None and again[0].response.verdict == pb.VERDICT_ALLOW


def test_a_request_sent_while_draining_ends_the_stream_with_server_draining(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    request = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    stream = Stream(checkpoint.stub())
    assert stream.ask("1", request).response.verdict == pb.VERDICT_ALLOW
    before = len(checkpoint.records())
    checkpoint.server.gate.start()  # what SIGTERM does first
    with pytest.raises(grpc.RpcError) as ended:
        stream.ask("2", request)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in ended.value.details()
    assert len(checkpoint.records()) == before  # nothing decided, nothing recorded
    stream.close()


def _held(running: Running):
    """The decision log's file held by another writer: every commit waits (SQLite's busy timeout)
    until the returned connection rolls back."""
    import sqlite3

    holder = sqlite3.connect(running.data / "decisions.db", isolation_level=None, timeout=5)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def _wait_for(condition, seconds: float = 10.0) -> bool:
    deadline = threading.Event()
    for _ in range(int(seconds / 0.01)):
        if condition():
            return True
        deadline.wait(0.01)
    return condition()


def test_a_streams_requests_are_decided_together_at_most_four_and_answered_in_order(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    runs = [checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": f"task-{i}"})) for i in range(3)]
    items = []
    for i in range(12):  # three runs, allows and denies interleaved
        request = tool_call("recon", version, "get_task" if i % 3 else "cancel_task", {"task_id": f"task-{i}"})
        request.run.CopyFrom(runs[i % 3].run)
        items.append(pb.CheckStreamRequest(correlation_id=f"c{i}", request=request))
    gate = checkpoint.server.gate
    holder = _held(checkpoint)
    try:
        answers = checkpoint.stub().CheckStream(iter(items), timeout=30)
        # while no record can commit, the stream has several requests in flight, never more than 4
        assert _wait_for(lambda: gate.in_flight == 4), gate.in_flight
        threading.Event().wait(0.2)
        assert gate.in_flight == 4
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    got = list(answers)
    assert [a.correlation_id for a in got] == [f"c{i}" for i in range(12)]
    records = {r["decision_id"]: r for r in checkpoint.records()}
    run_ids = [records[got[i].response.decision_id]["run_id"] for i in range(3)]
    assert len(set(run_ids)) == 3
    for i, answer in enumerate(got):
        record = records[answer.response.decision_id]  # every answer has its own record
        assert record["run_id"] == run_ids[i % 3]
        assert record["tool"] == ("get_task" if i % 3 else "cancel_task")
        if i % 3:
            assert answer.response.verdict == pb.VERDICT_ALLOW and answer.response.grant.run_id == run_ids[i % 3]
        else:
            assert answer.response.verdict == pb.VERDICT_DENY and not answer.response.HasField("grant")
    assert _wait_for(lambda: gate.in_flight == 0)


def test_draining_ends_the_stream_after_the_answers_already_being_decided(checkpoint: Running) -> None:
    version = checkpoint.version("recon")
    request = checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-t"}))
    gate = checkpoint.server.gate
    stream = Stream(checkpoint.stub())
    holder = _held(checkpoint)
    try:
        for i in range(3):
            stream._out.put(pb.CheckStreamRequest(correlation_id=str(i), request=request))
        assert _wait_for(lambda: gate.in_flight == 3)
        gate.start()  # SIGTERM's first step, with three requests of the stream being decided
        stream._out.put(pb.CheckStreamRequest(correlation_id="late", request=request))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    got = [next(stream.answers) for _ in range(3)]
    assert [a.correlation_id for a in got] == ["0", "1", "2"]
    assert all(a.response.verdict == pb.VERDICT_ALLOW for a in got)
    with pytest.raises(grpc.RpcError) as ended:
        next(stream.answers)
    assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and "server_draining" in ended.value.details()
    logged = {r["decision_id"] for r in checkpoint.records()}
    assert {a.response.decision_id for a in got} <= logged
    assert len([r for r in checkpoint.records() if r["tool"] == "get_task"]) == 3  # the late one: not decided
    stream.close()
    assert _wait_for(lambda: gate.in_flight == 0)
