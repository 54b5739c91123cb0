"""follow(): stored records first, then live ones, for several followers at once."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from checkpoint.audit import DecisionReader

WAIT = 20  # seconds: a generous bound for a record to arrive, not a timing assertion


class Follower:
    def __init__(self, records: Iterator[dict[str, Any]]) -> None:
        self.got: queue.Queue[dict[str, Any]] = queue.Queue()
        self.finished = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(records,), daemon=True)
        self._thread.start()

    def _run(self, records: Iterator[dict[str, Any]]) -> None:
        try:
            for record in records:
                self.got.put(record)
        finally:
            self.finished.set()

    def take(self, n: int) -> list[int]:
        return [self.got.get(timeout=WAIT)["seq"] for _ in range(n)]


@pytest.mark.timeout(60)
def test_follow_catches_up_then_follows_live_records(log, make_record):
    for _ in range(5):
        log.append(make_record())
    stop = threading.Event()
    follower = Follower(log.follow(2, stop_event=stop))
    assert follower.take(3) == [3, 4, 5]
    for _ in range(3):
        log.append(make_record())
    assert follower.take(3) == [6, 7, 8]
    assert follower.got.empty()
    stop.set()
    log.wake_followers()
    assert follower.finished.wait(WAIT)


@pytest.mark.timeout(60)
def test_several_followers_with_filters_each_see_their_records(log, make_record):
    log.append(make_record(run_id="a"))
    stop = threading.Event()
    everything = Follower(log.follow(0, stop_event=stop))
    run_a = Follower(log.follow(0, run_id="a", stop_event=stop))
    denials = Follower(log.follow(0, verdict="DENY", code="rule_denied", stop_event=stop))

    def writer(run: str) -> None:
        for i in range(50):
            verdict = {"verdict": "DENY", "code": "rule_denied"} if i % 5 == 0 else {}
            log.append(make_record(run_id=run, **verdict))

    writers = [threading.Thread(target=writer, args=(run,)) for run in ("a", "b", "c")]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stored = list(log.read())
    assert everything.take(151) == [r["seq"] for r in stored]
    assert run_a.take(51) == [r["seq"] for r in stored if r["run_id"] == "a"]
    assert denials.take(30) == [r["seq"] for r in stored if r["verdict"] == "DENY"]
    stop.set()
    log.wake_followers()
    for follower in (everything, run_a, denials):
        assert follower.finished.wait(WAIT)
        assert follower.got.empty()


@pytest.mark.timeout(60)
def test_follow_ends_on_close_after_yielding_everything_committed(log_path, make_record):
    from checkpoint.audit import DecisionLog

    decision_log = DecisionLog(log_path)
    follower = Follower(decision_log.follow(0))
    seqs = [decision_log.append(make_record()) for _ in range(20)]
    decision_log.close()
    assert follower.finished.wait(WAIT)
    assert [follower.got.get_nowait()["seq"] for _ in range(follower.got.qsize())] == seqs


@pytest.mark.timeout(60)
def test_standalone_reader_follows_records_written_by_a_log(log, log_path, make_record):
    # The CLI's `tail --follow` path: no condition variable to share, it polls.
    log.append(make_record())
    stop = threading.Event()
    follower = Follower(DecisionReader(log_path).follow(0, stop_event=stop, poll_interval=0.02))
    assert follower.take(1) == [1]
    log.append(make_record())
    assert follower.take(1) == [2]
    stop.set()
    assert follower.finished.wait(WAIT)
