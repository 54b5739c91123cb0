"""A CheckStream's requests decided several at a time, answered in the order they came.

One stream's calls would otherwise wait for each other: request N+1 is not read until request N's
record is committed and its answer sent, so a stream never shares a commit with itself. Here up to
`window` requests of one stream are read and decided at once, by that many decider threads of
the stream's own; the decision log's group commit then takes their records in one transaction.

What does not change:
- each answer is its own Check's: decided, recorded (committed) before it is handed back, and a
  request that fails gets its own error answer;
- answers leave in request order: the deciders take a slot in the answer queue in the order they
  read, under the lock that reads, and the stream's handler sends slot after slot;
- the drain gate counts each request from the moment it is read until its answer has left; a
  request read while draining ends the stream after the answers before it, with nothing decided
  for it;
- at most `window` requests are read and not yet answered, so a caller that does not read its
  answers stops being read (gRPC's flow control then stops it sending).

Requests that come one at a time (a caller that waits for each answer) are decided one at a time
as before: a decider waits for the next request while the others wait for the reading lock.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from warden.drain import Drain

WINDOW = 4  # requests of one stream in flight at once: enough for several to share a commit

# what the answer queue holds besides each request's slot
_END = object()  # the caller's requests ended
_DRAINING = object()  # a request came while draining: refuse it, after the answers before it


class _Slot:
    """One request's answer, waited for by the stream's handler. A plain lock, released when the
    answer is in, wakes exactly that waiter (a Future's Condition costs several times as much)."""

    __slots__ = ("done", "answer", "error", "finished", "abandoned")

    def __init__(self) -> None:
        self.done = threading.Lock()
        self.done.acquire()
        self.answer: Any = None
        self.error: BaseException | None = None
        self.finished = False  # the decision is over (under the stream's `settling` lock)
        self.abandoned = False  # the stream ended first: the decider leaves the gate itself

    def result(self) -> Any:
        self.done.acquire()
        if self.error is not None:
            raise self.error
        return self.answer


class _Failed:
    """Reading the caller's requests raised (the call was cancelled, its deadline passed): the
    stream ends with that error after the answers before it."""

    def __init__(self, error: BaseException):
        self.error = error


def pipelined(requests: Iterator[Any], answer: Callable[[Any], Any], gate: Drain, *,
              on_draining: Callable[[], None], observe: Callable[[float], None],
              clock: Callable[[], float], window: int = WINDOW) -> Iterator[Any]:
    """Yield `answer(item)` for each of `requests`, in order, up to `window` decided at once.
    `on_draining` is called (and must raise) when a request comes while the gate is draining."""
    slots: queue.SimpleQueue[Any] = queue.SimpleQueue()
    # room: one token per request that may be read and not yet answered (a SimpleQueue is C code;
    # threading.Semaphore is a Python Condition)
    room: queue.SimpleQueue[None] = queue.SimpleQueue()
    for _ in range(window):
        room.put(None)
    reading = threading.Lock()  # one decider reads at a time; it may wait long for the caller
    putting = threading.Lock()  # held briefly: a slot is put only while the stream is not stopped
    settling = threading.Lock()  # a finished decision and a stream that ends agree on who leaves the gate
    state = {"stopped": False}  # set once: no decider reads or puts again

    def put(slot: Any) -> bool:
        """Queue `slot` unless the stream stopped; a request's slot only once it is inside the gate.
        True when a request's slot was queued (decide it)."""
        with putting:
            if state["stopped"]:
                return False
            if type(slot) is _Slot and not gate.enter():
                slot = _DRAINING
            if type(slot) is not _Slot:
                state["stopped"] = True  # the last thing this stream reads
            slots.put(slot)
            return type(slot) is _Slot

    def decide() -> None:
        while True:
            room.get()
            with reading:
                if state["stopped"]:
                    return
                try:
                    item = next(requests)
                except StopIteration:
                    put(_END)
                    return
                except BaseException as exc:  # noqa: BLE001  # handed to the stream, which raises it
                    put(_Failed(exc))
                    return
                slot = _Slot()
                if not put(slot):  # stopped, or draining: nothing decided for this request
                    return
            started = clock()
            try:
                slot.answer = answer(item)
            except BaseException as exc:  # noqa: BLE001  # the stream raises it in its turn, as before
                slot.error = exc
            finally:
                observe(clock() - started)
                with settling:
                    slot.finished = True
                    abandoned = slot.abandoned
                slot.done.release()
                if abandoned:  # its record is committed; its answer has nowhere to go
                    gate.leave()

    # each decider runs in a copy of the stream's context (its trace id reaches the records)
    deciders = [threading.Thread(target=contextvars.copy_context().run, args=(decide,), daemon=True,
                                 name="check-stream") for _ in range(window)]
    for thread in deciders:
        thread.start()
    try:
        while True:
            slot = slots.get()
            if slot is _END:
                return
            if slot is _DRAINING:
                on_draining()
                return
            if isinstance(slot, _Failed):
                raise slot.error
            try:
                yield slot.result()
            finally:
                gate.leave()
                room.put(None)
    finally:
        _stop(state, putting, settling, room, slots, gate, window)


def _stop(state: dict[str, bool], putting: threading.Lock, settling: threading.Lock,
          room: queue.SimpleQueue[None], slots: queue.SimpleQueue[Any], gate: Drain, window: int) -> None:
    """The stream ended (its requests ended, it failed, or its caller went): no decider reads or
    puts again, and each request still being decided leaves the gate when its decision is done (its
    record is still committed; only its answer has nowhere to go)."""
    with putting:
        state["stopped"] = True
    for _ in range(window):  # wake every decider waiting for room: each sees `stopped` and returns
        room.put(None)
    while True:
        try:
            slot = slots.get_nowait()
        except queue.Empty:
            return
        if type(slot) is _Slot:
            with settling:
                finished = slot.finished
                slot.abandoned = not finished
            if finished:
                gate.leave()
