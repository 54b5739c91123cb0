"""Requests and clients shared by the server tests."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import grpc

from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.errors import error_detail_of


def run_context(
    agent: str, version: str, *, run_id: str = "run-1", mode: int = pb.RUN_MODE_INTERACTIVE
) -> pb.RunContext:
    return pb.RunContext(
        tenant="acme",
        run_id=run_id,
        root_run_id=run_id,
        mode=mode,  # type: ignore[arg-type]
        actor_chain=[
            pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
            pb.Actor(kind=pb.ACTOR_KIND_AGENT, id=agent, agent_version=version, run_id=run_id),
        ],
    )


def tool_call(agent: str, version: str, tool: str, args: dict[str, Any], **run: Any) -> pb.CheckRequest:
    req = pb.CheckRequest(run=run_context(agent, version, **run), tool_call=pb.ToolCall(tool=tool))
    req.tool_call.arguments.update(args)
    return req


LOOKUP_ARGS = {"order_id": "ord-1", "customer": "customer:bob"}


class BearerAuth(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                 grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call on an insecure channel."""

    def __init__(self, token: str):
        self.token = token

    def _with_token(self, details: Any) -> Any:
        metadata = list(details.metadata or []) + [("authorization", f"Bearer {self.token}")]
        return details._replace(metadata=metadata)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._with_token(details), requests)


def stub_for(channel: grpc.Channel) -> pb_grpc.CheckpointServiceStub:
    return pb_grpc.CheckpointServiceStub(channel)


def rpc_error(fn: Any, request: Any) -> tuple[grpc.StatusCode, pb.ErrorDetail | None]:
    try:
        fn(request, timeout=10)
    except grpc.RpcError as exc:
        return exc.code(), error_detail_of(exc)
    raise AssertionError("the call succeeded; an error was expected")


class Traffic:
    """Clients calling Check in a loop; every answer kept with its revision, and with the tickets
    drawn (from one counter) just before the call was sent and just after its answer came."""

    def __init__(self, stub, request, threads: int = 4):
        self.answers: list[pb.CheckResponse] = []
        self.timeline: list[tuple[int, int, pb.CheckResponse]] = []  # (sent, received, answer)
        self._tickets = itertools.count()
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(stub, request)) for _ in range(threads)]

    def _run(self, stub, request) -> None:
        while not self._stop.is_set():
            try:
                sent = next(self._tickets)
                answer = stub.Check(request, timeout=30)
                self.timeline.append((sent, next(self._tickets), answer))
                self.answers.append(answer)
            except Exception as exc:  # noqa: BLE001 - any failure is what the test looks for
                self.errors.append(exc)

    def __enter__(self) -> Traffic:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()
