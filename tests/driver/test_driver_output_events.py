"""Live tool output: coalesced into tool_output events, in order, capped per call."""

from __future__ import annotations

import time
from pathlib import Path

from driver_harness import PLAN, call, final

from driver import output_events
from driver.output_events import OutputEvents
from driver.render import event_line
from driver.runs.sqlite import SqliteRunStore


def _outputs(store: SqliteRunStore, run_id: str) -> list[dict]:
    return [e.data for e in store.events(run_id) if e.kind == "tool_output"]


def test_chunks_are_coalesced_per_stream_and_flushed_in_order(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(output_events, "FLUSH_SECONDS", 3600)  # only size, stream and flush() write here
    store = SqliteRunStore(tmp_path / "d.db")
    out = OutputEvents(store, "run-1", "scan", "d-1")
    for piece in ("a", "b", "c"):
        out("stdout", piece)
    out("stderr", "oops\n")
    out("stdout", "d")
    out.flush()
    got = [(e["stream"], e["text"]) for e in _outputs(store, "run-1")]
    assert got == [("stdout", "abc"), ("stderr", "oops\n"), ("stdout", "d")]
    assert all(e["tool"] == "scan" and e["decision_id"] == "d-1" for e in _outputs(store, "run-1"))


def test_a_line_followed_by_silence_still_shows(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(output_events, "FLUSH_SECONDS", 0.05)
    store = SqliteRunStore(tmp_path / "d.db")
    out = OutputEvents(store, "run-1", "scan", "d-1")
    out("stdout", "scanning 10.20.0.0/24\n")  # and then nothing for a long while
    deadline = time.monotonic() + 60
    while not _outputs(store, "run-1"):
        assert time.monotonic() < deadline, "the lone line was never written"
        time.sleep(0.01)
    assert [e["text"] for e in _outputs(store, "run-1")] == ["scanning 10.20.0.0/24\n"]
    out.flush()  # nothing left: no second event
    assert len(_outputs(store, "run-1")) == 1


def test_a_large_chunk_is_written_at_once_and_the_total_is_capped(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(output_events, "FLUSH_SECONDS", 3600)
    monkeypatch.setattr(output_events, "MAX_CHARS_PER_CALL", 5000)
    store = SqliteRunStore(tmp_path / "d.db")
    out = OutputEvents(store, "run-1", "scan", "d-1")
    out("stdout", "x" * 3000)  # over FLUSH_CHARS: written without waiting for flush()
    assert [len(e["text"]) for e in _outputs(store, "run-1")] == [3000]
    out("stdout", "y" * 3000)
    out("stdout", "z" * 10)  # past the cap: dropped
    out.flush()
    events = _outputs(store, "run-1")
    assert sum(len(e["text"]) for e in events) == 5000 and events[-1]["capped"] is True
    assert "live output capped" in event_line("tool_output", events[-1])


def test_a_run_streams_each_tool_s_output_before_its_receipt(stack) -> None:
    d = stack.driver()
    run = stack.start(d, [PLAN, call("create_task_from_template", template="web", target="web.lab.example.com"),
                          call("get_task", task_id="task-abc123"), final(reported="get_task said succeeded")])
    assert run.status == "succeeded", (run.code, run.reason)
    events = d.store.events(run.run_id)
    for receipt in d.store.receipts(run.run_id):
        mine = [e for e in events if e.data.get("decision_id") == receipt["decision_id"]]
        kinds = [e.kind for e in mine]
        assert "tool_output" in kinds and kinds.index("tool_output") < kinds.index("tool_receipt")
        streamed = "".join(e.data["text"] for e in mine if e.kind == "tool_output")
        assert streamed == receipt["output"]
