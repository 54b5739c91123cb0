"""WatchDecisions catching up then following; the Prometheus endpoint."""

from __future__ import annotations

import queue
import threading
import urllib.request

import grpc

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import PERSON_TOKEN
from .helpers import rpc_error, tool_call


def _started(running) -> pb.StartRunResponse:
    started = running.start_run("recon")
    assert started.decision.verdict == pb.VERDICT_ALLOW, started.decision
    return started


def _decide(running, n: int, tool: str = "get_task", run: pb.StartRunResponse | None = None) -> list[str]:
    """n checks in `run` (a run started for them when none is given; its start is recorded too)."""
    stub = running.stub()
    version = running.version("recon")
    run = run or _started(running)
    ids = []
    for i in range(n):
        req = tool_call("recon", version, tool, {"task_id": f"task-{i}"})
        req.run.CopyFrom(pb.RunContext(run_token=run.run_token))
        ids.append(stub.Check(req, timeout=5).decision_id)
    return ids


def _auditor(running):
    """Reading the log is the audit right: the driver principal has none, a person does."""
    return running.stub(PERSON_TOKEN)


def test_watch_is_for_principals_with_the_audit_right(checkpoint):
    code, detail = rpc_error(
        lambda req, timeout: list(checkpoint.stub().WatchDecisions(req, timeout=timeout)),
        pb.WatchDecisionsRequest(no_follow=True),
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED and detail is not None
    assert detail.code == "caller_not_permitted"


def test_watch_catches_up_then_follows(checkpoint):
    base = len(checkpoint.records(catalog=True))  # the first load's catalog records
    run = _started(checkpoint)
    first = [run.decision.decision_id, *_decide(checkpoint, 3, run=run)]
    got: queue.Queue = queue.Queue()
    stream = _auditor(checkpoint).WatchDecisions(pb.WatchDecisionsRequest(after_seq=base), timeout=30)

    def consume() -> None:
        try:
            for item in stream:
                got.put(item.record)
        except grpc.RpcError as exc:
            got.put(exc)

    threading.Thread(target=consume, daemon=True).start()
    caught_up = [got.get(timeout=10) for _ in range(4)]
    assert [r.decision_id for r in caught_up] == first
    later = _decide(checkpoint, 2, run=run)
    followed = [got.get(timeout=10) for _ in range(2)]
    assert [r.decision_id for r in followed] == later
    records = caught_up + followed
    assert [r.seq for r in records] == [base + n for n in range(1, 7)]
    assert all(r.prev_hash == p.hash for p, r in zip(records, records[1:], strict=False))
    assert (records[0].action, records[0].run_id) == ("start_run", run.run_id)
    assert records[1].actor_chain[0].id == "alice" and records[1].verdict == pb.VERDICT_ALLOW
    assert {r.run_id for r in records} == {run.run_id}
    stream.cancel()


def test_watch_filters_and_no_follow(checkpoint):
    run = _started(checkpoint)  # seq 1, ALLOW "allowed"
    allowed = _decide(checkpoint, 2, run=run)
    denied = _decide(checkpoint, 2, tool="cancel_task", run=run)
    stub = _auditor(checkpoint)
    deny_only = list(
        stub.WatchDecisions(pb.WatchDecisionsRequest(verdict=pb.VERDICT_DENY, no_follow=True), timeout=5)
    )
    assert [r.record.decision_id for r in deny_only] == denied
    by_code = list(stub.WatchDecisions(pb.WatchDecisionsRequest(code="allowed", no_follow=True), timeout=5))
    assert [r.record.decision_id for r in by_code] == [run.decision.decision_id, *allowed]
    base = len(checkpoint.records(catalog=True)) - 5  # the first load's catalog records come first
    after = list(stub.WatchDecisions(pb.WatchDecisionsRequest(after_seq=base + 4, no_follow=True), timeout=5))
    assert [r.record.seq for r in after] == [base + 5]
    this_run = list(stub.WatchDecisions(pb.WatchDecisionsRequest(run_id=run.run_id, no_follow=True), timeout=5))
    assert [r.record.seq for r in this_run] == [base + 1, base + 2, base + 3, base + 4, base + 5]
    other_run = list(stub.WatchDecisions(pb.WatchDecisionsRequest(run_id="nope", no_follow=True), timeout=5))
    assert other_run == []


def test_metrics_count_decisions_by_verdict_and_code(start):
    running = start(metrics_address="127.0.0.1:0")
    run = _started(running)  # a recorded decision too: ALLOW "allowed", but no decision function
    _decide(running, 3, run=run)
    _decide(running, 1, tool="cancel_task", run=run)
    text = (
        urllib.request.urlopen(f"http://127.0.0.1:{running.server.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    assert 'warden_checkpoint_decisions_total{code="allowed",verdict="ALLOW"} 4.0' in text  # 3 checks + the start
    assert 'warden_checkpoint_decisions_total{code="tool_not_allowed",verdict="DENY"} 1.0' in text
    assert 'warden_checkpoint_decision_seconds_bucket{le="5e-06"}' in text
    assert "warden_checkpoint_decision_seconds_count 4.0" in text
    assert "warden_checkpoint_grants_signed_total 3.0" in text
    assert 'warden_checkpoint_check_seconds_count{method="check"} 4.0' in text


def test_a_run_that_names_no_root_is_recorded_as_its_own_root(checkpoint):
    # StartRun mints a root run: its token names no parent, and it is its own root
    run = _started(checkpoint)
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token), model_call=pb.ModelCall(provider="p", model="m"))
    checkpoint.stub().Check(req, timeout=5)
    start, check = checkpoint.records()
    assert (start["run_id"], start["root_run_id"]) == (run.run_id, run.run_id)
    assert (check["run_id"], check["root_run_id"], check["parent_run_id"]) == (run.run_id, run.run_id, None)
    tree = list(_auditor(checkpoint).WatchDecisions(
        pb.WatchDecisionsRequest(root_run_id=run.run_id, no_follow=True), timeout=5))
    assert [(r.record.run_id, r.record.action) for r in tree] == [(run.run_id, "start_run"), (run.run_id, "model_call")]
