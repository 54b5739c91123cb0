"""Checks over one CheckStream held open: each request is answered in the order sent, with the
caller authenticated once, when the stream opens; a gateway that checks many calls pays no new
RPC per call.

The stream is opened on the first check and again after it ends. A check whose stream ends
before its answer comes is `CheckpointUnavailable`: the call is refused, never let through.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc

from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.client.failures import CheckpointUnavailable, ClientError, client_error

_CLOSE = None


class CheckStream:
    def __init__(self, stub: Any, metadata: list[tuple[str, str]], timeout: float) -> None:
        self._stub = stub
        self._md = metadata
        self._timeout = timeout
        self._lock = threading.Lock()
        self._pending: dict[str, Future[cp.CheckStreamResponse]] = {}
        self._outbox: queue.Queue[cp.CheckStreamRequest | None] | None = None

    def _open(self) -> queue.Queue[cp.CheckStreamRequest | None]:
        outbox: queue.Queue[cp.CheckStreamRequest | None] = queue.Queue()

        def requests() -> Iterator[cp.CheckStreamRequest]:
            while (item := outbox.get()) is not _CLOSE:
                yield item

        answers = self._stub.CheckStream(requests(), metadata=self._md)
        threading.Thread(target=self._read, args=(answers, outbox), name="warden-checkstream", daemon=True).start()
        return outbox

    def _read(self, answers: Any, outbox: queue.Queue[cp.CheckStreamRequest | None]) -> None:
        failure: ClientError = CheckpointUnavailable("checkpoint: the CheckStream ended", code="checkpoint_unavailable")
        try:
            for answer in answers:
                with self._lock:
                    waiting = self._pending.pop(answer.correlation_id, None)
                if waiting is not None:
                    waiting.set_result(answer)
        except grpc.RpcError as err:
            failure = client_error(err)
        with self._lock:
            if self._outbox is outbox:
                self._outbox = None  # the next check opens a new stream
            orphans, self._pending = self._pending, {}
        outbox.put(_CLOSE)
        for waiting in orphans.values():
            waiting.set_exception(failure)

    def check(self, request: cp.CheckRequest) -> cp.CheckResponse:
        correlation = uuid.uuid4().hex
        answer: Future[cp.CheckStreamResponse] = Future()
        with self._lock:
            if self._outbox is None:
                self._outbox = self._open()
            self._pending[correlation] = answer
            self._outbox.put(cp.CheckStreamRequest(correlation_id=correlation, request=request))
        try:
            got = answer.result(timeout=self._timeout)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(correlation, None)
            raise CheckpointUnavailable("checkpoint: no answer on the CheckStream in time",
                                        code="checkpoint_unavailable") from None
        if got.HasField("error"):
            raise ClientError(f"checkpoint: {got.error.message}", code=got.error.code or "checkpoint_error")
        return got.response

    def close(self) -> None:
        with self._lock:
            if self._outbox is not None:
                self._outbox.put(_CLOSE)
                self._outbox = None
