"""Runs that outlive their driver: two durable drivers (real processes) on one PostgreSQL store.

Each driver runs its runs as DBOS workflows and watches the other's lease (driver/durable). The
tests kill -9 (SIGKILL) or freeze (SIGSTOP) the driver holding a run at a named point
(durable_driver_process.py) and look, through the shared store and DBOS's own tables, at where the
run went: it finishes on the other driver from its last completed step, each tool call ran once
(the receipts), no turn was counted twice. Real parts: checkpoint, toolrunner (Docker), PostgreSQL.
Waits have deadlines that only guard against a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import psycopg
import pytest
import yaml
from driver_harness import CHECKPOINT_TOKEN, PLAN, TOOLRUNNER_TOKEN, call, final

from driver.goal import parse_goal
from driver.runs.model import AWAITING_APPROVAL, CANCELLED, PAUSED, SUCCEEDED
from driver.runs.postgresql import SCHEMA, open_postgresql
from driver.service import goal_to_proto
from warden.checkpoint.v1 import checkpoint_pb2 as cp
from warden.driver.v1 import driver_pb2 as pb
from warden.driver.v1 import driver_pb2_grpc as pb_grpc
from warden.store.errors import StoreUnavailable
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url

ROOT = Path(__file__).resolve().parents[2]
HELPER = Path(__file__).with_name("durable_driver_process.py")
TOKEN = "bob-operator-token-0123456789"
MD = [("authorization", f"Bearer {TOKEN}")]
TTL = 2.0
SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
NEEDS_APPROVAL = call("create_task_from_template", template="web", target="10.20.0.0/24")
SCRIPT = [PLAN, SCAN, final(scan_ran="created", reported="queued")]
APPROVAL_SCRIPT = [PLAN, NEEDS_APPROVAL, final(scan_ran="created", reported="queued")]
GOAL = goal_to_proto(parse_goal({
    "objective": "Scan the lab with the web template and report the task status.",
    "criteria": [{"id": "scan_ran", "description": "a scan task was created",
                  "check": {"kind": "receipt_ok", "tool": "create_task_from_template"}},
                 {"id": "reported", "description": "the task status is reported"}]}))


class Proc:
    """One durable driver process, its executor id and a stub to its DriverService."""

    def __init__(self, stack: Any, url: str, stall: str = "none", **env: str) -> None:
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), "WARDEN_TEST_CHECKPOINT_TOKEN": CHECKPOINT_TOKEN,
                    "WARDEN_TEST_TOOLRUNNER_TOKEN": TOOLRUNNER_TOKEN, **env}
        self.proc = subprocess.Popen([sys.executable, str(HELPER), url, str(stack.policy_dir), stack.checkpoint_address,
                                      stack.toolrunner_address, stall, str(TTL)],
                                     stdout=subprocess.PIPE, text=True, env=full_env, cwd=ROOT)
        self.executor = self.line("executor ").split()[1]
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.line('port ').split()[1]}")
        self.stub = pb_grpc.DriverServiceStub(self.channel)

    def line(self, prefix: str) -> str:
        """Read lines until one starts with `prefix`; a process that ends first fails the test."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line.strip()
        raise AssertionError(f"the driver process ended (exit {self.proc.wait(30)}) before {prefix!r}")

    def start(self, responses: list[Any]) -> str:
        script = yaml.safe_dump({"responses": responses})
        return str(self.stub.StartRun(pb.StartRunRequest(agent="recon", goal=GOAL, provider="scripted",
                                                         script_yaml=script), metadata=MD).run.run_id)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def close(self) -> None:
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.kill()


@pytest.fixture()
def store_url(pg_url: str) -> Any:
    url = parse_store_url(pg_url, default_folder=".")
    with Database(url, name="test-migrate", max_size=1) as db:
        migrate(db, SCHEMA)
    return url


@pytest.fixture()
def store(store_url: Any) -> Iterator[Any]:
    s = open_postgresql(store_url)
    yield s
    s.close()


@pytest.fixture()
def procs(stack: Any, pg_url: str, store_url: Any) -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in started:
        p.close()


def until(store: Any, run_id: str, ok: Any, what: str, deadline: float = 120) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            run = store.run(run_id)
        except StoreUnavailable:  # the test's own pool, after a database restart
            time.sleep(0.2)
            continue
        if ok(run):
            return run
        time.sleep(0.1)
    run = store.run(run_id)
    raise AssertionError(f"run {run_id} never {what}: {run.status} {run.code} {run.reason}; "
                         f"events {[e.kind for e in store.events(run_id)]}")


def workflow(store_url: Any, run_id: str) -> tuple[str, str]:
    """(executor id, DBOS status) of the run's workflow, from DBOS's own table."""
    with psycopg.connect(store_url.conninfo) as conn:
        row = conn.execute("SELECT executor_id, status FROM dbos.workflow_status WHERE workflow_uuid = %s",
                           (f"run:{run_id}",)).fetchone()
    assert row is not None, f"no workflow for run {run_id}"
    return str(row[0]), str(row[1])


def workflow_ends(store_url: Any, run_id: str, status: str = "SUCCESS") -> str:
    """Wait for the run's workflow to end (it returns just after the run's last step is stored);
    the executor it ended on."""
    end = time.monotonic() + 60
    while (got := workflow(store_url, run_id))[1] != status:
        assert time.monotonic() < end, f"the workflow of run {run_id} never ended {status}: {got}"
        time.sleep(0.1)
    return got[0]


def finished_once(store: Any, run_id: str, responses: list[Any]) -> list[dict[str, Any]]:
    """The run succeeded with each tool call once and each turn counted once; its tool receipts."""
    run = store.run(run_id)
    assert run.status == SUCCEEDED, (run.status, run.code, run.reason)
    receipts = store.receipts(run_id)
    assert [r["tool"] for r in receipts] == ["create_task_from_template"]
    replies = [e for e in store.events(run_id) if e.kind == "model_reply"]
    assert run.total_turns == len(replies) == len(responses)  # one scripted reply per turn, none twice
    return [e.data for e in store.events(run_id) if e.kind == "tool_receipt"]


@pytest.mark.parametrize("stall", ["before_execute", "after_execute"])
def test_a_run_whose_driver_is_killed_mid_step_finishes_on_the_other_with_each_tool_once(
        stack, pg_url, store_url, store, procs, stall):
    a = Proc(stack, pg_url, stall)
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    run_id = a.start(SCRIPT)
    a.line(f"at {stall}")
    assert workflow(store_url, run_id) == (a.executor, "PENDING")
    a.kill()
    run = until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert workflow_ends(store_url, run_id) == b.executor  # B took the workflow over
    receipts = finished_once(store, run_id, SCRIPT)
    # after the effect, B's re-run sent the same grant: the toolrunner answered with its stored receipt
    assert [r["replayed"] for r in receipts] == [stall == "after_execute"]
    assert run.total_turns == 3


def approve_at(node: Proc, stack: Any, store: Any, run_id: str) -> None:
    [approval] = store.approvals(run_id, status="pending")
    token = stack.approval_token(SimpleNamespace(store=store), approval.approval_id)
    node.stub.ApproveCall(pb.ApproveCallRequest(approval_id=approval.approval_id, approval_token=token),
                          metadata=MD, timeout=30)


def test_an_approval_sent_while_the_runs_driver_is_dead_reaches_the_run_on_the_other(
        stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url)
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    run_id = a.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    a.kill()
    approve_at(b, stack, store, run_id)  # A is dead and its workflow not yet taken over
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert workflow_ends(store_url, run_id) == b.executor
    finished_once(store, run_id, APPROVAL_SCRIPT)


def test_a_frozen_driver_loses_its_runs_and_stops_itself_when_it_wakes(stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url)
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    run_id = a.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    a.proc.send_signal(signal.SIGSTOP)
    end = time.monotonic() + 60
    while workflow(store_url, run_id)[0] != b.executor:  # B judged A dead (TTL) and took the run
        assert time.monotonic() < end, "the frozen driver's run was never taken over"
        time.sleep(0.1)
    approve_at(b, stack, store, run_id)
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    a.proc.send_signal(signal.SIGCONT)
    assert a.proc.wait(60) == 3  # its lease was found dead on waking: it stopped (fencing)
    finished_once(store, run_id, APPROVAL_SCRIPT)
    with psycopg.connect(store_url.conninfo) as conn:  # the dead lease was never renewed again
        assert conn.execute("SELECT count(*) FROM driver_leases WHERE executor_id = %s AND NOT dead",
                            (a.executor,)).fetchone() == (0,)


@pytest.mark.parametrize("at", ["a", "b"])
def test_cancel_and_pause_reach_a_run_at_either_driver(stack, pg_url, store_url, store, procs, at):
    a = Proc(stack, pg_url)
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    node = {"a": a, "b": b}[at]
    paused_id, cancelled_id = a.start(APPROVAL_SCRIPT), a.start(APPROVAL_SCRIPT)
    for run_id in (paused_id, cancelled_id):
        until(store, run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")

    node.stub.CancelRun(pb.CancelRunRequest(run_id=cancelled_id, reason="not today"), metadata=MD, timeout=30)
    assert store.run(cancelled_id).status == CANCELLED
    assert workflow_ends(store_url, cancelled_id, "CANCELLED") == a.executor  # the engine's cancel

    node.stub.PauseRun(pb.PauseRunRequest(run_id=paused_id, reason="look first"), metadata=MD, timeout=30)
    run = store.run(paused_id)
    assert (run.status, run.code) == (PAUSED, "paused")  # warden's own status; the workflow waits
    assert workflow(store_url, paused_id) == (a.executor, "PENDING")
    node.stub.ResumeRun(pb.ResumeRunRequest(run_id=paused_id), metadata=MD, timeout=30)
    until(store, paused_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval again")
    approve_at(node, stack, store, paused_id)
    until(store, paused_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert workflow_ends(store_url, paused_id) == a.executor
    assert store.receipts(cancelled_id) == []  # nothing ran for the cancelled run


def test_an_approval_that_waits_past_its_timeout_is_refused_and_recorded(stack, pg_url, store, procs):
    a = Proc(stack, pg_url, WARDEN_TEST_APPROVAL_TIMEOUT="1")
    procs.append(a)
    run_id = a.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: r.status not in (AWAITING_APPROVAL, "running") or any(
        e.kind == "approval_decided" for e in store.events(run_id)), "had its approval decided")
    [decided] = [e.data for e in store.events(run_id) if e.kind == "approval_decided"]
    assert (decided["decision"], decided["person"]) == ("rejected", "warden")
    assert decided["note"].startswith("approval_timeout")
    [approval] = store.approvals(run_id)
    assert approval.status == "rejected"
    assert store.receipts(run_id) == []  # the refused call never ran


def test_driver_serve_on_postgresql_runs_durable_workflows_and_holds_a_lease(pg_url, store_url, tmp_path):
    bad = subprocess.run([sys.executable, "-m", "warden.cli", "driver", "serve", "--store", pg_url, "--data",
                          str(tmp_path), "--address", "127.0.0.1:0", "--lease-ttl", "0"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert bad.returncode == 2 and "--lease-ttl" in bad.stderr.strip().splitlines()[-1]
    proc = subprocess.Popen([sys.executable, "-m", "warden.cli", "driver", "serve", "--store", pg_url, "--data",
                             str(tmp_path), "--address", "127.0.0.1:0", "--lease-ttl", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("driver listening on"), proc.stderr
        with psycopg.connect(store_url.conninfo) as conn:
            [(executor, dead)] = conn.execute("SELECT executor_id, dead FROM driver_leases").fetchall()
            assert not dead
            names = {r[0] for r in conn.execute("SELECT application_name FROM pg_stat_activity")}
            assert f"warden-driver:{executor}" in names and f"warden-dbos:{executor}" in names
            assert conn.execute("SELECT to_regclass('dbos.workflow_status') IS NOT NULL").fetchone() == (True,)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


def test_a_dead_drivers_runs_wait_for_a_driver_of_their_run_model_version(stack, pg_url, store_url, store, procs):
    old = Proc(stack, pg_url, WARDEN_TEST_RUN_MODEL_VERSION="warden-run-0")
    procs.append(old)
    new = Proc(stack, pg_url)
    procs.append(new)
    run_id = old.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    old.kill()
    approve_at(new, stack, store, run_id)
    with psycopg.connect(store_url.conninfo, autocommit=True) as conn:
        end = time.monotonic() + 60
        while conn.execute("SELECT dead FROM driver_leases WHERE executor_id = %s",
                           (old.executor,)).fetchone() != (True,):
            assert time.monotonic() < end, "the old driver was never judged dead"
            time.sleep(0.1)
        time.sleep(TTL * 3)  # several passes of the new driver's watch
        # the new release cannot take the run (DBOS recovers only its own version): it waits,
        # and the dead driver stays listed, neither lost nor driven by the wrong step sequence
        assert workflow(store_url, run_id) == (old.executor, "PENDING")
        assert conn.execute("SELECT dead FROM driver_leases WHERE executor_id = %s",
                            (old.executor,)).fetchone() == (True,)
        assert store.receipts(run_id) == []
        kept = Proc(stack, pg_url, WARDEN_TEST_RUN_MODEL_VERSION="warden-run-0")  # one old driver kept
        procs.append(kept)
        until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
        assert workflow_ends(store_url, run_id) == kept.executor
        finished_once(store, run_id, APPROVAL_SCRIPT)
        end = time.monotonic() + 60
        while conn.execute("SELECT count(*) FROM driver_leases WHERE executor_id = %s",
                           (old.executor,)).fetchone() != (0,):  # nothing of it pending: unlisted
            assert time.monotonic() < end, "the dead driver stayed listed after its runs moved"
            time.sleep(0.1)


@pytest.fixture()
def short_grants(policy_dir: Path) -> float:
    """Grants that expire 2 s after their check (asked for before the checkpoint starts)."""
    path = policy_dir / "instance.yaml"
    text = path.read_text()
    assert "grant_ttl_seconds: 120" in text
    path.write_text(text.replace("grant_ttl_seconds: 120", "grant_ttl_seconds: 2"))
    return 2.0


def test_a_tool_that_ran_before_its_grant_expired_is_not_run_again_by_the_driver_taking_over(
        short_grants, stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url, "after_execute")
    procs.append(a)
    run_id = a.start(SCRIPT)
    a.line("at after_execute")
    a.kill()  # the tool ran; its receipt never reached the store, and no driver is alive
    [executing] = [c for c in store.calls(run_id) if c["status"] == "executing"]
    expires = cp.Grant.FromString(executing["grant"]).expires_at.seconds
    while time.time() <= expires + 0.5:  # the grant lapses before anyone takes the run over
        time.sleep(0.1)
    b = Proc(stack, pg_url)
    procs.append(b)
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert workflow_ends(store_url, run_id) == b.executor
    receipts = finished_once(store, run_id, SCRIPT)  # the tool's receipt once: it did not run again
    assert [r["replayed"] for r in receipts] == [True]
    assert [r["decision_id"] for r in store.receipts(run_id)] == [executing["decision_id"]]


def test_a_call_whose_grant_lapsed_before_it_was_sent_is_decided_again_and_runs_once(
        short_grants, stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url, "before_execute")
    procs.append(a)
    run_id = a.start(SCRIPT)
    a.line("at before_execute")
    a.kill()  # checked and granted; never sent
    [executing] = [c for c in store.calls(run_id) if c["status"] == "executing"]
    expires = cp.Grant.FromString(executing["grant"]).expires_at.seconds
    while time.time() <= expires + 0.5:
        time.sleep(0.1)
    b = Proc(stack, pg_url)
    procs.append(b)
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    receipts = finished_once(store, run_id, SCRIPT)
    assert [r["replayed"] for r in receipts] == [False]  # it ran once, at B ...
    [receipt] = store.receipts(run_id)
    assert receipt["decision_id"] != executing["decision_id"]  # ... under a new decision, never unchecked
    decided = [e for e in store.events(run_id) if e.kind == "decision" and e.data.get("tool") == SCAN["tool"]]
    assert len(decided) == 2


def test_a_model_turn_a_check_and_an_execution_are_steps_of_the_runs_workflow(stack, pg_url, store_url, store, procs):
    import sqlalchemy as sa
    from dbos import DBOSClient

    a = Proc(stack, pg_url)
    procs.append(a)
    run_id = a.start(SCRIPT)
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    workflow_ends(store_url, run_id)
    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(store_url.conninfo))
    client = DBOSClient(system_database_engine=engine)
    try:
        steps = [(s["function_name"], s["output"]) for s in client.list_workflow_steps(f"run:{run_id}")]
    finally:
        client.destroy()
        engine.dispose()
    advanced = [out for name, out in steps if name == "warden.advance"]
    # the plan's turn, its check; the scan's turn, its check, then its execution as a step of its
    # own; the final report's turn and its conclusion
    assert advanced == ["model_turn", "check", "model_turn", "check", "execute", "model_turn", "conclude"], steps
    assert {name for name, _ in steps} <= {"warden.look", "warden.advance"}


def test_a_turn_cut_off_before_its_calls_were_stored_is_not_counted(stack, pg_url, store_url, store, procs):
    script = [PLAN, PLAN, SCAN, final(scan_ran="created", reported="queued")]  # the plan, asked twice
    a = Proc(stack, pg_url, "in_turn")
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    run_id = a.start(script)
    a.line("at in_turn")
    a.kill()
    run = until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded")
    assert workflow_ends(store_url, run_id) == b.executor
    # the model was asked four times, but the turn whose reply A never finished storing is not a
    # turn: three turns (the plan, the scan, the report), each with its calls, the tool once
    assert run.model_attempts == 4
    assert run.total_turns == 3
    assert [e.data["turn"] for e in store.events(run_id) if e.kind == "model_reply"] == [1, 2, 3]
    assert [c["tool"] for c in store.calls(run_id, 1)] == ["propose_plan"]  # asked again at B
    assert [c["tool"] for c in store.calls(run_id, 2)] == ["create_task_from_template"]
    assert [r["tool"] for r in store.receipts(run_id)] == ["create_task_from_template"]


def test_a_database_restart_makes_nobody_look_dead_and_the_runs_go_on_where_they_were(
        stack, pg_server, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url)
    procs.append(a)
    b = Proc(stack, pg_url)
    procs.append(b)
    waiting = a.start(APPROVAL_SCRIPT)
    until(store, waiting, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    moving = a.start(SCRIPT)
    pg_server.stop()  # while `moving` takes its steps: every lease goes stale at once
    try:
        time.sleep(TTL * 3)
    finally:
        pg_server.start()
    run = until(store, moving, lambda r: r.status == SUCCEEDED, "succeeded")
    assert run.status == SUCCEEDED
    approve_at(b, stack, store, waiting)
    until(store, waiting, lambda r: r.status == SUCCEEDED, "succeeded")
    for run_id in (moving, waiting):  # both finished on A: nobody judged it dead
        assert workflow_ends(store_url, run_id) == a.executor
        finished_once(store, run_id, SCRIPT if run_id == moving else APPROVAL_SCRIPT)
    assert a.proc.poll() is None and b.proc.poll() is None  # nobody was fenced
    with psycopg.connect(store_url.conninfo) as conn:
        assert conn.execute("SELECT count(*) FROM driver_leases WHERE dead").fetchone() == (0,)


def test_the_checkpoints_deadline_expires_a_durable_runs_approval_on_the_record(
        stack, pg_url, store, procs, policy_dir, checkpoint_server):
    rules = policy_dir / "rules" / "recon.yaml"
    wide = "name: wide-scans-need-approval\n"
    rules.write_text(rules.read_text().replace(wide, wide + "approval_timeout_seconds: 2\n"))
    assert checkpoint_server.store.reload()
    a = Proc(stack, pg_url)  # its own approval timeout is a day: the checkpoint's two seconds decide
    procs.append(a)
    run_id = a.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: any(e.kind == "approval_decided" for e in store.events(run_id)),
          "had its approval decided")
    [decided] = [e.data for e in store.events(run_id) if e.kind == "approval_decided"]
    assert (decided["decision"], decided["code"]) == ("expired", "approval_timed_out")
    assert [r["action"] for r in checkpoint_server.log.read(run_id=run_id) if r["action"] == "expire"] == ["expire"]
    assert store.receipts(run_id) == []  # the call whose approval expired never ran
