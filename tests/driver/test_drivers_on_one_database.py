"""Two drivers on one PostgreSQL store: what a person does at either reaches a run wherever it is
driven, and no run or approval is taken twice.

Real parts: one checkpoint, one toolrunner, a real PostgreSQL server (tests/pgserver.py), and two
DriverService servers on loopback ports, each with its own pool on the shared database, as two
driver processes would be. A step that must be "under way" when a person acts is held from inside
it (a hook on driver A's toolrunner client); waits have deadlines that only guard against a hang.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
import yaml
from driver_harness import PLAN, call, final
from grpc_health.v1 import health_pb2, health_pb2_grpc

from driver.goal import parse_goal
from driver.loop import Driver
from driver.providers.scripted import parse_script
from driver.runs.model import PAUSED, RUNNING, SUCCEEDED
from driver.runs.postgresql import SCHEMA, open_postgresql
from driver.service import create_server, goal_from_proto, goal_to_proto
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

TOKEN = "bob-operator-token-0123456789"
MD = [("authorization", f"Bearer {TOKEN}")]
SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
NEEDS_APPROVAL = call("create_task_from_template", template="web", target="10.20.0.0/24")
GOAL = goal_to_proto(parse_goal({
    "objective": "Scan the lab with the web template and report the task status.",
    "criteria": [{"id": "scan_ran", "description": "a scan task was created",
                  "check": {"kind": "receipt_ok", "tool": "create_task_from_template"}},
                 {"id": "reported", "description": "the task status is reported"}]}))


class Node:
    """One driver process: its Driver (on its own store of the shared database) and its server."""

    def __init__(self, driver: Driver) -> None:
        self.driver = driver
        self.running, port = create_server("127.0.0.1:0", driver, {hashlib.sha256(TOKEN.encode()).digest(): "bob"})
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.stub = pb_grpc.DriverServiceStub(self.channel)

    def start(self, responses: list[Any]) -> str:
        script = yaml.safe_dump({"responses": responses})
        return str(self.stub.StartRun(pb.StartRunRequest(agent="recon", goal=GOAL, provider="scripted",
                                                         script_yaml=script), metadata=MD).run.run_id)

    def watch_until(self, run_id: str, kinds: set[str], after_seq: int = 0) -> list[str]:
        seen = []
        request = pb.WatchRunRequest(run_id=run_id, after_seq=after_seq)
        for resp in self.stub.WatchRun(request, metadata=MD, timeout=90):
            seen.append(resp.event.kind)
            if resp.event.kind in kinds:
                break
        return seen

    def close(self) -> None:
        self.channel.close()
        self.running.stop(0)


@pytest.fixture()
def store_url(pg_url: str) -> Any:
    url = parse_store_url(pg_url, default_folder=".")
    with Database(url, name="test-migrate", max_size=1) as db:
        migrate(db, SCHEMA)
    return url


@pytest.fixture()
def nodes(stack: Any, store_url: Any) -> Iterator[tuple[Node, Node]]:
    a, b = (Node(stack.driver(store=open_postgresql(store_url))) for _ in range(2))
    yield a, b
    a.close()
    b.close()


def until(d: Driver, run_id: str, ok: Any, what: str, deadline: float = 90) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        run = d.store.run(run_id)
        if ok(run):
            return run
        time.sleep(0.05)
    run = d.store.run(run_id)
    raise AssertionError(f"run {run_id} never {what}: {run.status} {run.code} {run.reason}; "
                         f"events {[e.kind for e in d.store.events(run_id)]}")


def health_becomes(node: Node, status: int, deadline: float = 30) -> bool:
    stub = health_pb2_grpc.HealthStub(node.channel)
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if stub.Check(health_pb2.HealthCheckRequest(service="warden.driver.v1.DriverService")).status == status:
            return True
        time.sleep(0.1)
    return False


def test_a_run_started_at_a_is_listed_watched_and_approved_at_b_and_the_approval_is_taken_once(nodes, stack):
    a, b = nodes
    run_id = a.start([PLAN, NEEDS_APPROVAL, final(scan_ran="created", reported="queued")])
    assert run_id in [r.run_id for r in b.stub.ListRuns(pb.ListRunsRequest(), metadata=MD).runs]
    # B follows the events A's worker writes, live, until the run waits for a person
    assert b.watch_until(run_id, {"approval_requested"})[-1] == "approval_requested"
    [approval] = b.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=MD).run.pending_approvals
    request = pb.ApproveCallRequest(approval_id=approval.approval_id, note="ok",
                                    approval_token=stack.approval_token(a.driver, approval.approval_id))

    # the same approval sent to both drivers at once: one of them takes it, the other is refused
    answers: list[Any] = []
    barrier = threading.Barrier(2)

    def approve(node: Node) -> None:
        barrier.wait()
        try:
            answers.append(node.stub.ApproveCall(request, metadata=MD, timeout=30))
        except grpc.RpcError as err:
            answers.append(err)

    racers = [threading.Thread(target=approve, args=(n,)) for n in (b, a)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    refused = [x for x in answers if isinstance(x, grpc.RpcError)]
    assert len(answers) == 2 and len(refused) == 1, answers
    assert refused[0].code() == grpc.StatusCode.FAILED_PRECONDITION
    assert any(code in refused[0].details() for code in ("approval_not_pending", "run_not_awaiting_approval"))

    assert b.watch_until(run_id, {"run_succeeded", "run_paused"})[-1] == "run_succeeded"
    for node in (a, b):
        node.driver.wait(run_id, timeout=30)
    assert b.driver.store.approval(approval.approval_id).decided_by == "bob"
    decided = [e for e in b.driver.store.events(run_id) if e.kind == "approval_decided"]
    assert len(decided) == 1  # one decision, relayed once
    assert [r["tool"] for r in a.driver.store.receipts(run_id)] == ["create_task_from_template"]  # ran once


def test_a_run_approved_at_b_while_a_still_holds_it_is_driven_on_by_a(nodes, stack, monkeypatch):
    """A's worker has moved the run to awaiting_approval but not yet let it go when the approval
    reaches B: B's worker finds the run held and leaves it; A, letting go, finds it running
    again and drives it on. Nobody drives it twice, and it is never left running undriven."""
    a, b = nodes
    real_driving = a.driver.store.driving
    letting_go, let_go = threading.Event(), threading.Event()

    @contextmanager
    def slow_to_let_go(run_id: str) -> Iterator[bool]:
        with real_driving(run_id) as mine:
            yield mine
            if mine and not letting_go.is_set():
                letting_go.set()
                assert let_go.wait(60)

    monkeypatch.setattr(a.driver.store, "driving", slow_to_let_go)
    run_id = a.start([PLAN, NEEDS_APPROVAL, final(scan_ran="created", reported="queued")])
    assert letting_go.wait(60)
    [approval] = b.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=MD).run.pending_approvals
    b.stub.ApproveCall(pb.ApproveCallRequest(approval_id=approval.approval_id, approval_token=stack.approval_token(
        a.driver, approval.approval_id)), metadata=MD)
    b.driver.wait(run_id, timeout=30)  # B's worker found the run held by A, and left it
    assert b.driver.store.run(run_id).status == RUNNING
    let_go.set()
    run = until(a.driver, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert run.status == SUCCEEDED
    assert [r["tool"] for r in a.driver.store.receipts(run_id)] == ["create_task_from_template"]


def test_a_pause_sent_to_b_reaches_the_run_a_drives_and_b_resumes_it(nodes, monkeypatch):
    a, b = nodes
    real_execute = a.driver.toolrunner.execute
    under_way, go_on, drove = threading.Event(), threading.Event(), []

    def held(req: Any, output: Any) -> Any:
        drove.append(req.tool)
        if req.tool == SCAN["tool"] and not under_way.is_set():
            under_way.set()  # the scan runs at A while a person pauses the run at B
            assert go_on.wait(60)
        return real_execute(req, output)

    monkeypatch.setattr(a.driver.toolrunner, "execute", held)
    run_id = a.start([PLAN, {"actions": [SCAN, call("get_task", task_id="task-abc123")]},
                      final(scan_ran="created", reported="queued")])
    assert under_way.wait(60)
    paused = b.stub.PauseRun(pb.PauseRunRequest(run_id=run_id, reason="look at the scan first"), metadata=MD).run
    assert (paused.status, paused.code) == (pb.RUN_STATUS_PAUSED, "paused")
    go_on.set()
    a.driver.wait(run_id, timeout=60)  # A's worker stops at its next step boundary
    run = until(a.driver, run_id, lambda r: r.status == PAUSED, "paused")
    assert run.paused_by == "bob" and "look at the scan first" in run.reason
    # the step under way at A finished and is kept; the next call was not decided
    assert drove == ["create_task_from_template"]
    assert [r["tool"] for r in b.driver.store.receipts(run_id)] == ["create_task_from_template"]
    assert [(c["tool"], c["status"]) for c in a.driver.store.calls(run_id, run.turn)] == [
        ("create_task_from_template", "done"), ("get_task", "pending")]

    last_seq = b.driver.store.events(run_id)[-1].seq
    b.stub.ResumeRun(pb.ResumeRunRequest(run_id=run_id), metadata=MD)
    assert a.watch_until(run_id, {"run_succeeded", "run_paused"}, last_seq)[-1] == "run_succeeded"
    b.driver.wait(run_id, timeout=30)
    assert drove == ["create_task_from_template"]  # B drove the rest: A ran nothing more
    assert [r["tool"] for r in a.driver.store.receipts(run_id)] == ["create_task_from_template", "get_task"]
    assert a.driver.store.run(run_id).status == SUCCEEDED


def test_a_driver_refuses_while_the_database_is_gone_and_serves_again_without_a_restart(
        nodes, pg_server, monkeypatch, caplog):
    a, b = nodes
    real_execute = a.driver.toolrunner.execute
    under_way, go_on = threading.Event(), threading.Event()

    def held(req: Any, output: Any) -> Any:
        got = real_execute(req, output)
        if req.tool == SCAN["tool"] and not under_way.is_set():
            under_way.set()  # the scan ran; its receipt is not stored yet
            assert go_on.wait(60)
        return got

    monkeypatch.setattr(a.driver.toolrunner, "execute", held)
    caplog.set_level("WARNING", logger="warden.driver")
    run_id = a.start([PLAN, SCAN, final(scan_ran="created", reported="queued")])
    assert under_way.wait(60)
    pg_server.stop()
    try:
        go_on.set()  # the scan's receipt finds no database to go to: the run waits for it
        for node in (a, b):
            with pytest.raises(grpc.RpcError) as err:
                node.stub.ListRuns(pb.ListRunsRequest(), metadata=MD, timeout=30)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "store_unavailable" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:
            b.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=MD, timeout=30)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "store_unavailable" in err.value.details()
        end = time.monotonic() + 30
        while not any(f"run {run_id} waits for the store" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < end, "the run's worker never met the outage"
            time.sleep(0.05)
        assert health_becomes(b, health_pb2.HealthCheckResponse.NOT_SERVING)
    finally:
        pg_server.start()
    assert health_becomes(b, health_pb2.HealthCheckResponse.SERVING)
    end = time.monotonic() + 30
    while True:  # back by itself: no driver restarted
        try:
            listed = b.stub.ListRuns(pb.ListRunsRequest(), metadata=MD, timeout=30).runs
            break
        except grpc.RpcError:
            assert time.monotonic() < end, "the driver did not serve again once the database was back"
            time.sleep(0.2)
    assert run_id in [r.run_id for r in listed]
    # the run goes on from its last committed step (the call is sent again with its grant: the
    # toolrunner answers with the stored receipt), and its tool call ran once
    run = until(a.driver, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert run.status == SUCCEEDED
    assert [r["tool"] for r in a.driver.store.receipts(run_id)] == ["create_task_from_template"]


def test_a_missing_schema_stops_the_start_in_one_line(pg_url: str, tmp_path: Path) -> None:
    got = subprocess.run([sys.executable, "-m", "warden.cli", "driver", "serve", "--store", pg_url,
                          "--data", str(tmp_path), "--address", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got.stderr
    [line] = got.stderr.strip().splitlines()
    assert "store_schema_mismatch" in line and "warden store migrate" in line
    assert not (tmp_path / "driver.db").exists()  # nothing half-started on the side


def test_a_run_is_driven_by_one_driver_at_a_time(store_url: Any) -> None:
    first, second = open_postgresql(store_url), open_postgresql(store_url)
    try:
        with first.driving("run-1") as mine:
            assert mine
            with second.driving("run-1") as theirs, second.driving("run-2") as other_run:
                assert not theirs and other_run  # held by the first; another run is free
        with second.driving("run-1") as now_free:
            assert now_free  # let go: the next driver may take it
    finally:
        first.close()
        second.close()


def test_a_driver_that_starts_leaves_a_run_another_drives_and_continues_one_nobody_does(
        nodes, stack, store_url, monkeypatch):
    a, _ = nodes
    real_execute = a.driver.toolrunner.execute
    under_way, go_on = threading.Event(), threading.Event()

    def held(req: Any, output: Any) -> Any:
        if req.tool == SCAN["tool"] and not under_way.is_set():
            under_way.set()
            assert go_on.wait(60)
        return real_execute(req, output)

    monkeypatch.setattr(a.driver.toolrunner, "execute", held)
    driven = a.start([PLAN, SCAN, final(scan_ran="created", reported="queued")])
    assert under_way.wait(60)
    # a run left running with no driver holding it (its driver died before it took it up)
    script = parse_script(yaml.safe_dump({"responses": [PLAN, SCAN, final(scan_ran="created", reported="queued")]}))
    orphan = a.driver.start_run("recon", goal_from_proto(GOAL), owner="bob", provider="scripted",
                                provider_options={"script": script}, spawn=False).run_id

    c = stack.driver(store=open_postgresql(store_url))
    try:
        assert c.recover() == [orphan]  # A's run is A's: no second worker, no run_recovered event
        assert "run_recovered" not in [e.kind for e in c.store.events(driven)]
        go_on.set()
        for d, run_id in ((a.driver, driven), (c, orphan)):
            assert until(d, run_id, lambda r: r.status == SUCCEEDED, "succeeded").status == SUCCEEDED
            assert [r["tool"] for r in d.store.receipts(run_id)] == ["create_task_from_template"]
    finally:
        go_on.set()
        c.stop()


def test_a_driver_that_lost_its_hold_on_a_run_stops_at_the_next_step(nodes, stack, store_url, monkeypatch):
    """The database drops the connection that holds A's lock while A runs a step (as a restart
    does); a driver that starts meanwhile takes the run up. A finishes its step (kept) and drives
    nothing more: the run goes on at the new driver only, each tool call once."""
    a, _ = nodes
    real_execute = a.driver.toolrunner.execute
    under_way, go_on, at_a = threading.Event(), threading.Event(), []

    def held(req: Any, output: Any) -> Any:
        at_a.append(req.tool)
        got = real_execute(req, output)
        if req.tool == SCAN["tool"] and not under_way.is_set():
            under_way.set()
            assert go_on.wait(60)
        return got

    monkeypatch.setattr(a.driver.toolrunner, "execute", held)
    run_id = a.start([PLAN, SCAN, call("get_task", task_id="task-abc123"),
                      final(scan_ran="created", reported="queued")])
    assert under_way.wait(60)
    with psycopg.connect(store_url.conninfo, autocommit=True) as admin:  # a lock's session ends
        dropped = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                                "AND objsubid = 1 AND database = (SELECT oid FROM pg_database "
                                "WHERE datname = current_database())").fetchall()
    assert len(dropped) == 1
    c = stack.driver(store=open_postgresql(store_url))
    try:
        assert c.recover() == [run_id]  # nobody holds it now
        go_on.set()
        a.driver.wait(run_id, timeout=60)
        run = until(c, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
        assert run.status == SUCCEEDED
        assert at_a == ["create_task_from_template"]  # A stopped after the step it was in
        assert [r["tool"] for r in c.store.receipts(run_id)] == ["create_task_from_template", "get_task"]
    finally:
        go_on.set()
        c.stop()
