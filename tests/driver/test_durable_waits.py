"""Approval waits across a takeover: a durable driver (a real process) waits for an approval, is
killed (SIGKILL), and a driver started after it takes the run over.

The wait's deadline is decided once, when the wait starts, and recorded as the run's
`approval_wait` event: the driver taking over keeps it (even with another approval timeout of its
own), an approval recorded while no driver held the run reaches the run as soon as it is taken
over (not at the end of the old wait), and a deadline that passed during the takeover is one
refusal, recorded once. Real parts: checkpoint, toolrunner (Docker), PostgreSQL.
"""

from __future__ import annotations

import time
import urllib.request
from typing import Any

from test_durable_runs import (
    APPROVAL_SCRIPT,
    MD,
    TTL,
    Proc,
    finished_once,
    procs,
    store,
    store_url,
    until,
    workflow,
)

from driver.durable import waits
from driver.durable.holders import holders
from driver.render import run_line
from driver.runs.model import AWAITING_APPROVAL, PAUSED, SUCCEEDED, EventKind
from warden.driver.v1 import driver_pb2 as pb

__all__ = ["procs", "store", "store_url"]  # fixtures, shared with test_durable_runs


def scrape(address: str) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def wait_events(store: Any, run_id: str) -> list[dict[str, Any]]:
    return [e.data for e in store.events(run_id) if e.kind == "approval_wait"]


def waiting_on(store: Any, run_id: str) -> dict[str, Any]:
    """Once the run awaits approval and its wait is recorded: that record."""
    end = time.monotonic() + 120
    while not (got := wait_events(store, run_id)):
        assert time.monotonic() < end, f"run {run_id} never recorded its approval wait"
        time.sleep(0.1)
    [wait] = got
    return wait


def test_an_approval_recorded_while_no_driver_holds_the_run_reaches_it_when_a_new_driver_takes_it_over(
        stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url)
    procs.append(a)
    run_id = a.start(APPROVAL_SCRIPT)
    until(store, run_id, lambda r: r.status == AWAITING_APPROVAL, "waited for approval")
    wait = waiting_on(store, run_id)
    held = a.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=MD, timeout=30).run
    assert (held.lease_holder, held.lease_holder_dead) == (a.executor, False)
    assert time.time() - 1 < held.lease_expires_at.ToSeconds() <= time.time() + TTL + 1
    assert f"held by {a.executor}" in run_line(held)
    a.kill()
    time.sleep(TTL + 0.5)  # A's lease runs out: its run is shown held by a dead driver
    [(holder, dead)] = [(h.executor_id, h.dead) for h in holders(store.db, [run_id], TTL).values()]
    assert (holder, dead) == (a.executor, True)
    # nobody drives the run now: the approval is recorded on the shared store (the checkpoint
    # signed the person's token) by a driver that runs no workflows, so no message wakes the wait
    [approval] = store.approvals(run_id, status="pending")
    assert wait["approval_id"] == approval.approval_id
    relay = stack.driver(store=store)
    relay.approve(approval.approval_id, "bob", approval_token=stack.approval_token(relay, approval.approval_id),
                  spawn=False)
    assert workflow(store_url, run_id) == (a.executor, "PENDING")
    b = Proc(stack, pg_url)  # started after A died: it judges A dead and takes the run over
    procs.append(b)
    # well before the old wait would have looked again by itself (300 s)
    until(store, run_id, lambda r: r.status == SUCCEEDED, "succeeded", deadline=90)
    assert workflow(store_url, run_id)[0] == b.executor
    finished_once(store, run_id, APPROVAL_SCRIPT)  # the approved tool ran once
    assert wait_events(store, run_id) == [wait]  # the wait was not started again


def test_a_deadline_that_passes_during_the_takeover_is_one_refusal_and_not_a_new_wait(
        stack, pg_url, store_url, store, procs):
    a = Proc(stack, pg_url, WARDEN_TEST_APPROVAL_TIMEOUT="4")
    procs.append(a)
    run_id = a.start(APPROVAL_SCRIPT)
    wait = waiting_on(store, run_id)
    [approval] = store.approvals(run_id, status="pending")
    assert wait["deadline"] == approval.created_at + 4  # fixed when the wait started
    a.kill()
    while time.time() < wait["deadline"] + 0.5:  # the deadline passes while nobody holds the run
        time.sleep(0.1)
    # B's own timeout is a day: restarting the clock would make the run wait a day more
    b = Proc(stack, pg_url, WARDEN_TEST_APPROVAL_TIMEOUT="86400", WARDEN_TEST_METRICS="1")
    procs.append(b)
    metrics = int(b.line("metrics ").split()[1])
    until(store, run_id, lambda r: any(e.kind == "approval_decided" for e in store.events(run_id)),
          "had its approval decided", deadline=60)
    # the model read the refusal and went on: its final claims a scan that never ran
    run = until(store, run_id, lambda r: r.status == PAUSED, "went on after the refusal", deadline=60)
    assert run.code == "criteria_unmet"
    decided = [e.data for e in store.events(run_id) if e.kind == "approval_decided"]
    assert [(d["decision"], d["person"]) for d in decided] == [("rejected", "warden")]  # once
    assert decided[0]["note"].startswith("approval_timeout")
    assert [x.status for x in store.approvals(run_id)] == ["rejected"]
    assert store.receipts(run_id) == []  # the refused call never ran
    assert wait_events(store, run_id) == [wait]  # not waited again
    assert workflow(store_url, run_id)[0] == b.executor
    # the paused run's workflow waits for a person at B: B holds it, and says so
    shown = b.stub.GetRun(pb.GetRunRequest(run_id=run_id), metadata=MD, timeout=30).run
    assert (shown.lease_holder, shown.lease_holder_dead) == (b.executor, False)
    [listed] = [r for r in b.stub.ListRuns(pb.ListRunsRequest(), metadata=MD, timeout=30).runs if r.run_id == run_id]
    assert (listed.lease_holder, listed.lease_holder_dead) == (b.executor, False)  # ListRuns: the same, batched
    samples = scrape(f"127.0.0.1:{metrics}")
    assert samples["warden_driver_runs_taken_over_total"] == 1
    assert samples["warden_driver_leases_held"] == 1



def test_a_wait_is_decided_once_and_read_back_even_by_a_driver_with_another_timeout(store):
    store.create_run(run_id="run-w", agent="recon", agent_version="v1", tenant="acme", owner="alice")
    for i in range(1001):  # the wait's event lands past the first page of the run's log
        store.append_event("run-w", EventKind.NUDGED, n=i)
    approval_id = store.add_approval(run_id="run-w", call=1, decision_id="d1", tool="scan", arguments={},
                                     code="approval_required", rule="r", reason="why")
    approval = store.approval(approval_id)
    assert waits.recorded(store, "run-w", approval_id) is None
    first = waits.begin(store, approval, 60)
    assert (first.deadline, first.timeout_seconds) == (approval.created_at + 60, 60)
    again = waits.begin(store, approval, 86400)  # a driver configured otherwise, after a takeover
    assert again == first == waits.recorded(store, "run-w", approval_id)
    assert [e.data["approval_id"] for e in store.events("run-w", after_seq=0, limit=5000)
            if e.kind == "approval_wait"] == [approval_id]
    # the checkpoint named an earlier deadline for another approval of the run: that one ends it
    soon = approval.created_at + 5
    other_id = store.add_approval(run_id="run-w", call=2, decision_id="d2", tool="scan", arguments={},
                                  code="approval_required", rule="r", reason="why", deadline=soon)
    other = waits.begin(store, store.approval(other_id), 60)
    assert other.deadline == soon and waits.recorded(store, "run-w", approval_id) == first


def test_two_drivers_that_both_begin_a_wait_agree_on_the_first_one_recorded(store):
    """A takeover while the old driver still runs: both read no wait, both append their own. The
    other driver's append is made to land between this driver's read and its write."""
    store.create_run(run_id="run-2w", agent="recon", agent_version="v1", tenant="acme", owner="alice")
    approval_id = store.add_approval(run_id="run-2w", call=1, decision_id="d1", tool="scan", arguments={},
                                     code="approval_required", rule="r", reason="why")
    approval = store.approval(approval_id)

    class OtherDriverFirst:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def append_event(self, run_id: str, kind: str, **data: Any) -> Any:
            store.append_event(run_id, kind, **{**data, "deadline": approval.created_at + 60, "timeout_seconds": 60})
            return store.append_event(run_id, kind, **data)

    mine = waits.begin(OtherDriverFirst(), approval, 86400)
    assert (mine.deadline, mine.timeout_seconds) == (approval.created_at + 60, 60)  # the other's, recorded first
    assert waits.begin(store, approval, 86400) == mine == waits.recorded(store, "run-2w", approval_id)


def test_warden_runs_shows_who_holds_a_run_and_a_dead_holder_as_such():
    base = {"run_id": "run-1", "agent": "recon", "agent_version": "v1", "owner": "alice"}
    assert "held by" not in run_line(pb.Run(**base))  # a finished run, or SQLite: nobody
    live = pb.Run(**base, lease_holder="host-1-ab")
    live.lease_expires_at.FromSeconds(0)
    assert run_line(live).endswith("  held by host-1-ab (lease to 00:00:00Z)")
    dead = pb.Run(**base, lease_holder="host-1-ab", lease_holder_dead=True)
    assert run_line(dead).endswith("  held by host-1-ab (dead: being taken over)")
