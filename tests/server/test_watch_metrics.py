"""WatchDecisions catching up then following; the Prometheus endpoint."""

from __future__ import annotations

import queue
import threading
import urllib.request

import grpc

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import run_context, tool_call


def _decide(running, n: int, tool: str = "get_task") -> list[str]:
    stub = running.stub()
    version = running.version("recon")
    return [
        stub.Check(tool_call("recon", version, tool, {"task_id": f"task-{i}"}), timeout=5).decision_id
        for i in range(n)
    ]


def test_watch_catches_up_then_follows(checkpoint):
    first = _decide(checkpoint, 3)
    got: queue.Queue = queue.Queue()
    stream = checkpoint.stub().WatchDecisions(pb.WatchDecisionsRequest(after_seq=0), timeout=30)

    def consume() -> None:
        try:
            for item in stream:
                got.put(item.record)
        except grpc.RpcError as exc:
            got.put(exc)

    threading.Thread(target=consume, daemon=True).start()
    caught_up = [got.get(timeout=10) for _ in range(3)]
    assert [r.decision_id for r in caught_up] == first
    later = _decide(checkpoint, 2)
    followed = [got.get(timeout=10) for _ in range(2)]
    assert [r.decision_id for r in followed] == later
    records = caught_up + followed
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert all(r.prev_hash == p.hash for p, r in zip(records, records[1:], strict=False))
    assert records[0].actor_chain[0].id == "alice" and records[0].verdict == pb.VERDICT_ALLOW
    stream.cancel()


def test_watch_filters_and_no_follow(checkpoint):
    allowed = _decide(checkpoint, 2)
    denied = _decide(checkpoint, 2, tool="cancel_task")
    stub = checkpoint.stub()
    deny_only = list(
        stub.WatchDecisions(pb.WatchDecisionsRequest(verdict=pb.VERDICT_DENY, no_follow=True), timeout=5)
    )
    assert [r.record.decision_id for r in deny_only] == denied
    by_code = list(stub.WatchDecisions(pb.WatchDecisionsRequest(code="allowed", no_follow=True), timeout=5))
    assert [r.record.decision_id for r in by_code] == allowed
    after = list(stub.WatchDecisions(pb.WatchDecisionsRequest(after_seq=3, no_follow=True), timeout=5))
    assert [r.record.seq for r in after] == [4]
    other_run = list(stub.WatchDecisions(pb.WatchDecisionsRequest(run_id="nope", no_follow=True), timeout=5))
    assert other_run == []


def test_metrics_count_decisions_by_verdict_and_code(start):
    running = start(metrics_address="127.0.0.1:0")
    _decide(running, 3)
    _decide(running, 1, tool="cancel_task")
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{running.server.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    assert 'warden_checkpoint_decisions_total{code="allowed",verdict="ALLOW"} 3.0' in text
    assert 'warden_checkpoint_decisions_total{code="tool_not_allowed",verdict="DENY"} 1.0' in text
    assert 'warden_checkpoint_decision_seconds_bucket{le="5e-06"}' in text
    assert "warden_checkpoint_decision_seconds_count 4.0" in text
    assert "warden_checkpoint_grants_signed_total 3.0" in text
    assert 'warden_checkpoint_check_seconds_count{method="check"} 4.0' in text


def test_a_run_that_names_no_root_is_recorded_as_its_own_root(checkpoint):
    version = checkpoint.version("recon")
    req = pb.CheckRequest(run=run_context("recon", version), model_call=pb.ModelCall(provider="p", model="m"))
    req.run.run_id, req.run.root_run_id = "run-lonely", ""
    checkpoint.stub().Check(req, timeout=5)
    assert checkpoint.records()[-1]["root_run_id"] == "run-lonely"
    tree = list(checkpoint.stub().WatchDecisions(
        pb.WatchDecisionsRequest(root_run_id="run-lonely", no_follow=True), timeout=5))
    assert [r.record.run_id for r in tree] == ["run-lonely"]
