"""The contract of a RunStore (driver/runs/store.py): what any store of the driver's runs must do.

Every test takes a `backend` and asks it for stores, and runs on each: SQLite (one file) and
PostgreSQL (a fresh database of a real server, migrated first). A backend is a class with `open()`,
a second `open()` on the same storage (as a second driver process would), and `corrupt()`, which
leaves one run's row the way a foreign or broken write would."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from driver.errors import RunStateError
from driver.runs.model import (
    AWAITING_APPROVAL,
    AWAITING_CHILD,
    CANCELLED,
    FAILED,
    PARENT_PAUSED,
    PAUSED,
    PERSON_PAUSED,
    RUNNING,
    SUCCEEDED,
    Approval,
    Event,
    EventKind,
    Pause,
    PauseState,
    Run,
    RunStatus,
)
from driver.runs.postgresql import SCHEMA, PostgresRunStore, open_postgresql
from driver.runs.sqlite import SqliteRunStore
from driver.runs.store import RunStore
from warden.store.migrations import migrate
from warden.store.pg import Database
from warden.store.url import parse_store_url


class SqliteBackend:
    def __init__(self, tmp: Path) -> None:
        self.path = tmp / "driver.db"
        self.opened: list[SqliteRunStore] = []

    def open(self) -> RunStore:
        store = SqliteRunStore(self.path)
        self.opened.append(store)
        return store

    def corrupt(self, run_id: str, column: str, value: str) -> None:
        with sqlite3.connect(self.path) as db:
            db.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", [value, run_id])

    def close(self) -> None:
        for store in self.opened:
            store.close()


class PostgresBackend:
    """A fresh database of the test's own, migrated as `warden store migrate` does."""

    def __init__(self, url: str) -> None:
        self.url = parse_store_url(url, default_folder=".")
        with Database(self.url, name="test-migrate", max_size=1) as db:
            migrate(db, SCHEMA)
        self.opened: list[PostgresRunStore] = []

    def open(self) -> RunStore:
        store = open_postgresql(self.url)
        self.opened.append(store)
        return store

    def corrupt(self, run_id: str, column: str, value: str) -> None:
        with psycopg.connect(self.url.conninfo, autocommit=True) as conn:
            conn.execute(f"UPDATE driver_runs SET {column} = %s WHERE run_id = %s", (value, run_id))

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "postgresql":
        made: Any = PostgresBackend(request.getfixturevalue("pg_url"))
    else:
        made = SqliteBackend(tmp_path)
    yield made
    made.close()


@pytest.fixture()
def store(backend: Any) -> RunStore:
    return backend.open()


def _run(store: RunStore, run_id: str = "run-1", **fields: Any) -> Run:
    return store.create_run(run_id=run_id, **{"agent": "recon", "agent_version": "v1", "tenant": "acme",
                                               "owner": "alice", **fields})


# -- runs ---------------------------------------------------------------------------------


def test_a_new_run_is_running_typed_and_read_back_as_written(store: RunStore) -> None:
    made = _run(store, budget={"turns": 5}, tool_specs=[{"name": "scan"}], delegates=["triage"])
    assert isinstance(made, Run) and made.status is RunStatus.RUNNING
    got = store.run("run-1")
    assert got == made and got.root_run_id == "run-1" and got.depth == 0
    assert (got.budget, got.tool_specs, got.delegates, got.plan, got.final, got.missing) == (
        {"turns": 5}, [{"name": "scan"}], ["triage"], None, None, [])
    assert store.has_run("run-1") and not store.has_run("run-2")


def test_a_missing_run_is_run_not_found(store: RunStore) -> None:
    with pytest.raises(RunStateError) as err:
        store.run("nope")
    assert err.value.code == "run_not_found"


def test_an_unknown_field_is_refused_on_create_and_update(store: RunStore) -> None:
    with pytest.raises(KeyError):
        _run(store, colour="red")
    _run(store)
    for bad in ({"colour": "red"}, {"status": "succeeded"}):
        with pytest.raises(KeyError):
            store.update_run("run-1", **bad)
    assert store.run("run-1").status == RUNNING


def test_runs_are_listed_by_status_tenant_and_tree(store: RunStore) -> None:
    _run(store, "a")
    _run(store, "b", tenant="other")
    _run(store, "c", parent_run_id="a", root_run_id="a", depth=1)
    store.set_status("b", SUCCEEDED, "succeeded", "done")
    assert [r.run_id for r in store.runs()] == ["c", "b", "a"]  # newest first
    assert [r.run_id for r in store.runs(status=RUNNING)] == ["c", "a"]
    assert [r.run_id for r in store.runs(tenants=["other"])] == ["b"]
    assert store.runs(tenants=[]) == []
    assert [r.run_id for r in store.runs(root_run_id="a")] == ["a", "c"]  # a tree: oldest first
    assert [r.run_id for r in store.children("a")] == ["c"]
    store.add_turn("c", total_tokens=7, turn=1)
    assert store.tree("a") == (2, 7)


def test_counters_add_up_and_a_turn_counts_in_every_run_above(store: RunStore) -> None:
    _run(store, "root")
    _run(store, "mid", parent_run_id="root", root_run_id="root", depth=1)
    _run(store, "leaf", parent_run_id="mid", root_run_id="root", depth=2)
    assert store.add_to_run("leaf", consecutive_failures=2, drift=1).consecutive_failures == 2
    with pytest.raises(KeyError):
        store.add_to_run("leaf", status=1)  # only counters are added to
    leaf = store.add_turn("leaf", stretch_turns=1, total_turns=1, turn=1, total_tokens=10)
    assert (leaf.total_turns, leaf.turn, leaf.total_tokens, leaf.descendant_total_turns) == (1, 1, 10, 0)
    for above in ("mid", "root"):
        got = store.run(above)
        assert (got.descendant_total_turns, got.descendant_stretch_turns, got.total_turns) == (1, 1, 0)


# -- status moves -------------------------------------------------------------------------


def test_the_transitions_of_a_run(store: RunStore) -> None:
    _run(store)
    assert store.transition("run-1", RUNNING, AWAITING_APPROVAL, "approval_required", "a person decides")
    assert store.waits_for_person("run-1")
    assert store.transition("run-1", AWAITING_APPROVAL, RUNNING, "", "")
    assert store.hold("run-1", PERSON_PAUSED, "paused by bob", "bob")
    paused = store.run("run-1")
    assert (paused.status, paused.code, paused.paused_by, paused.held_by_person) == (PAUSED, "paused", "bob", True)
    assert not store.hold("run-1", PERSON_PAUSED, "again", "carol")  # paused already: nothing written
    assert store.transition("run-1", PAUSED, RUNNING, "", "")
    assert store.set_status_logged("run-1", SUCCEEDED, "succeeded", "done", met=["c1"])
    ended = store.run("run-1")
    assert ended.ended and (ended.code, ended.reason) == ("succeeded", "done")
    assert [(e.kind, e.data) for e in store.events("run-1")] == [
        ("run_paused", {"code": "paused", "reason": "paused by bob", "person": "bob"}),
        ("run_succeeded", {"code": "succeeded", "reason": "done", "met": ["c1"]})]


@pytest.mark.parametrize("move", ["transition", "set_status", "set_status_logged", "hold"])
def test_a_bad_transition_is_refused_and_writes_nothing(store: RunStore, move: str) -> None:
    _run(store)
    store.set_status("run-1", CANCELLED, "cancelled", "by alice")
    before = store.run("run-1")
    moved = {"transition": lambda: store.transition("run-1", RUNNING, PAUSED, "x", "y"),
             "set_status": lambda: store.set_status("run-1", RUNNING, "", ""),
             "set_status_logged": lambda: store.set_status_logged("run-1", FAILED, "x", "y"),
             "hold": lambda: store.hold("run-1", PERSON_PAUSED, "x", "bob")}[move]()
    assert moved is False
    after = store.run("run-1")
    assert (after.status, after.code, after.reason) == (before.status, before.code, before.reason) == (
        CANCELLED, "cancelled", "by alice")
    assert store.events("run-1") == []


def test_a_run_waits_for_its_child_only_while_the_call_does(store: RunStore) -> None:
    _run(store, "parent")
    _run(store, "child", parent_run_id="parent", root_run_id="parent", depth=1)
    pk = store.add_call("parent", 0, 0, call_id="t1", tool="delegate", arguments={}, args_sha="", plan_step="")
    store.update_call(pk, status="awaiting_child", child_run_id="child")
    assert store.call_for_child("child")["id"] == pk  # type: ignore[index]
    assert store.wait_for_child("parent", pk, "waiting for child")
    assert store.run("parent").status == AWAITING_CHILD
    assert not store.waits_for_person("parent")
    store.hold("child", PERSON_PAUSED, "paused by bob", "bob")
    assert store.waits_for_person("parent")  # through the child it waits for
    store.transition("parent", AWAITING_CHILD, RUNNING, "", "")
    store.update_call(pk, status="done", result={"is_error": False, "content": "ok"})
    assert not store.wait_for_child("parent", pk, "waiting for child")  # its outcome is in
    assert store.run("parent").status == RUNNING


# -- pauses -------------------------------------------------------------------------------


def test_a_pause_goes_from_intent_to_applied_and_reaches_the_active_children(store: RunStore) -> None:
    _run(store, "p")
    _run(store, "c1", parent_run_id="p", root_run_id="p", depth=1)
    _run(store, "c2", parent_run_id="p", root_run_id="p", depth=1)
    store.set_status("c2", SUCCEEDED, "succeeded", "done")
    intent = store.add_pause("p", PERSON_PAUSED, "bob", "paused by bob", "look")
    assert isinstance(intent, Pause) and intent.state is PauseState.INTENT
    assert store.add_pause("p", PERSON_PAUSED, "carol", "again") is None  # one open pause per run
    store.pause_recorded(intent.pause_id)
    assert store.pause(intent.pause_id).state == PauseState.RECORDED
    moved, below = store.apply_pause(intent.pause_id)
    assert moved and [(b.run_id, b.code, b.parent_run_id, b.person) for b in below] == [
        ("c1", PARENT_PAUSED, "p", "bob")]
    assert store.pause(intent.pause_id).state == PauseState.APPLIED
    assert store.apply_pause(intent.pause_id) == (False, [])  # closed: nothing more
    assert [p.run_id for p in store.open_pauses()] == ["c1"]
    assert store.open_pauses(["p"]) == [] and store.open_pauses([]) == []
    assert store.apply_pause(below[0].pause_id)[0]
    assert store.run("c1").code == PARENT_PAUSED
    assert store.pause_below("p", "bob", "") == []  # nobody active is left below


def test_a_pause_not_recorded_is_dropped_and_a_settled_one_is_void(store: RunStore) -> None:
    _run(store)
    first = store.add_pause("run-1", PERSON_PAUSED, "bob", "paused by bob")
    assert first is not None
    store.drop_pause(first.pause_id)
    with pytest.raises(RunStateError) as err:
        store.pause(first.pause_id)
    assert err.value.code == "pause_not_found"
    second = store.add_pause("run-1", PERSON_PAUSED, "bob", "paused by bob")
    assert second is not None
    store.pause_recorded(second.pause_id)
    store.drop_pause(second.pause_id)  # on the record: no longer dropped
    store.void_open_pauses("run-1")
    assert store.pause(second.pause_id).state == PauseState.VOID and store.open_pauses() == []


# -- goals, events, transcript, calls -------------------------------------------------------


def test_goals_are_versioned(store: RunStore) -> None:
    _run(store)
    assert store.add_goal("run-1", {"objective": "a"}, "alice") == 1
    assert store.add_goal("run-1", {"objective": "b"}, "bob") == 2
    assert store.goal("run-1") == {"objective": "b"} and store.goal("run-1", 1) == {"objective": "a"}
    with pytest.raises(RunStateError):
        store.goal("nope")


def test_events_are_appended_in_order_and_followed_to_the_final_one(store: RunStore) -> None:
    _run(store)
    _run(store, "other")
    first = store.append_event("run-1", EventKind.RUN_STARTED, agent="recon")
    store.append_event("other", EventKind.RUN_STARTED)
    store.append_event("run-1", EventKind.NUDGED)
    got = store.events("run-1")
    assert all(isinstance(e, Event) for e in got) and [e.kind for e in got] == ["run_started", "nudged"]
    assert got[0].seq == first and got[0].data == {"agent": "recon"} and got[1].seq > first
    assert [e.kind for e in store.events("run-1", after_seq=first)] == ["nudged"]
    assert len(store.events()) == 3 and len(store.events(limit=1)) == 1
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=lambda: seen.extend(store.follow("run-1", 0, stop, poll_seconds=0.01)))
    watcher.start()
    store.set_status_logged("run-1", FAILED, "boom", "it broke")
    watcher.join(30)
    stop.set()
    assert not watcher.is_alive() and [e.kind for e in seen] == ["run_started", "nudged", "run_failed"]


def test_transcript_calls_and_a_final_report(store: RunStore) -> None:
    _run(store)
    store.add_transcript("run-1", {"role": "user", "text": "go"})
    assert store.transcript("run-1") == [{"role": "user", "text": "go"}]
    pk = store.add_call("run-1", 1, 0, call_id="t1", tool="scan", arguments={"target": "x"}, args_sha="s",
                        plan_step="p1")
    store.update_call(pk, status="done", result={"is_error": False, "content": "ok"})
    pk2 = store.add_call("run-1", 1, 1, call_id="t2", tool="scan", arguments={"target": "x"}, args_sha="s",
                         plan_step="")
    [c1, c2] = store.calls("run-1", 1)
    assert (c1["arguments"], c1["result"], c2["status"], c2["result"]) == ({"target": "x"}, {
        "is_error": False, "content": "ok"}, "pending", None)
    assert store.identical_calls("run-1", "s", "scan", pk2) == 1
    assert store.identical_calls("run-1", "s", "scan", pk2, from_turn=2) == 0
    store.begin_final("run-1", 1, {"turn": 1, "summary": "done"}, [
        {"call_id": "verify-c1", "tool": "scan", "arguments": {}, "args_sha": "", "plan_step": "", "verifies": "c1"}])
    assert store.run("run-1").final == {"turn": 1, "summary": "done"}
    assert [c["verifies"] for c in store.calls("run-1")] == ["", "", "c1"]


# -- approvals, receipts, spend ---------------------------------------------------------------


def test_an_approval_is_decided_once(store: RunStore) -> None:
    _run(store)
    approval_id = store.add_approval(run_id="run-1", call=1, decision_id="d1", tool="scan",
                                     arguments={"target": "x"}, code="approval_required", rule="r", reason="why")
    [pending] = store.approvals("run-1", status="pending")
    assert isinstance(pending, Approval) and pending.arguments == {"target": "x"}
    decided = store.decide_approval(approval_id, "approved", "bob", "fine", token="tok")
    assert (decided.status, decided.decided_by, decided.token) == ("approved", "bob", "tok")
    with pytest.raises(RunStateError) as err:
        store.decide_approval(approval_id, "rejected", "carol")
    assert err.value.code == "approval_not_pending"
    store.settle_approval(approval_id, "used")
    assert store.approval(approval_id).status == "used" and store.approvals(status="pending") == []
    with pytest.raises(RunStateError) as missing:
        store.approval("apr-nope")
    assert missing.value.code == "approval_not_found"


def test_receipts_and_spend(store: RunStore) -> None:
    _run(store)
    store.add_receipt("run-1", "d1", "scan", 0, "", "out", {"exit_code": 0})
    store.add_receipt("run-1", "d2", "scan", 1, "", "bad", {"exit_code": 1}, verifies="c1")
    assert [r["decision_id"] for r in store.receipts("run-1")] == ["d1", "d2"]
    assert [r["decision_id"] for r in store.receipts("run-1", work_only=True)] == ["d1"]
    assert store.receipt("d2")["verifies"] == "c1" and store.receipt("nope") is None  # type: ignore[index]
    store.add_spend("run-1", "alice", "acme", 0.25)
    store.add_spend("run-1", "bob", "acme", 0.5)
    store.add_spend("run-1", "alice", "acme", 0)  # nothing spent, nothing written
    assert store.spend_today("alice", "acme") == (0.25, 0.75)


# -- half-written rows and concurrent writers ---------------------------------------------------


@pytest.mark.parametrize(("column", "value"), [("budget", '{"turns": 3'), ("status", "runnin")])
def test_a_half_written_row_is_refused_never_guessed_at(backend: Any, column: str, value: str) -> None:
    store = backend.open()
    _run(store)
    _run(store, "fine")
    backend.corrupt("run-1", column, value)
    for read in (lambda: store.run("run-1"), lambda: store.runs()):
        with pytest.raises(RunStateError) as err:
            read()
        assert err.value.code == "run_state_unavailable"
    assert store.run("fine").status == RUNNING


def test_a_write_that_fails_half_way_leaves_nothing(store: RunStore) -> None:
    _run(store)
    with pytest.raises(TypeError):  # the event cannot be written: the status move is undone with it
        store.set_status_logged("run-1", PAUSED, "x", "y", code="twice")
    assert store.run("run-1").status == RUNNING and store.events("run-1") == []
    with pytest.raises(Exception):  # noqa: B017 - the second call is not a call: neither is kept, nor the final
        store.begin_final("run-1", 1, {"turn": 1}, [
            {"call_id": "v1", "tool": "scan", "arguments": {}, "args_sha": "", "plan_step": "", "verifies": "c1"},
            {"call_id": "v2", "no_such_column": 1}])
    assert store.calls("run-1") == [] and store.run("run-1").final is None


def test_concurrent_writers_on_one_store_lose_nothing_and_one_move_wins(backend: Any) -> None:
    stores = [backend.open(), backend.open()]  # two writers, as two driver processes would be
    _run(stores[0])
    for n in range(4):
        _run(stores[0], f"child-{n}", parent_run_id="run-1", root_run_id="run-1", depth=1)
    per_thread, threads, errors = 25, [], []

    def work(store: RunStore, n: int) -> None:
        try:
            for _ in range(per_thread):
                store.add_turn(f"child-{n}", total_turns=1, turn=1)
                store.add_to_run("run-1", consecutive_failures=1)
                store.append_event("run-1", EventKind.NUDGED, writer=n)
        except Exception as exc:  # noqa: BLE001 - reported below, with the writer that failed
            errors.append((n, exc))

    for n in range(4):
        threads.append(threading.Thread(target=work, args=(stores[n % 2], n)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    root = stores[1].run("run-1")
    assert root.consecutive_failures == 4 * per_thread
    assert root.descendant_total_turns == 4 * per_thread  # every child's turn counted above it
    assert [stores[0].run(f"child-{n}").total_turns for n in range(4)] == [per_thread] * 4
    seqs = [e.seq for e in stores[0].events("run-1", limit=10_000)]
    assert len(seqs) == 4 * per_thread and seqs == sorted(set(seqs))

    wins: list[bool] = []
    barrier = threading.Barrier(2)

    def race(store: RunStore, to: RunStatus) -> None:
        barrier.wait()
        wins.append(store.set_status_logged("run-1", to, str(to), "raced"))

    racers = [threading.Thread(target=race, args=(s, to))
              for s, to in zip(stores, (SUCCEEDED, CANCELLED), strict=True)]
    for t in racers:
        t.start()
    for t in racers:
        t.join(60)
    assert sorted(wins) == [False, True]
    finals = [e.kind for e in stores[0].events("run-1", limit=10_000) if e.kind != "nudged"]
    assert len(finals) == 1 and finals[0] == f"run_{stores[1].run('run-1').status}"


def test_a_store_that_answers_says_so(store: RunStore) -> None:
    assert store.ping() is True  # health reads it (warden/store/watch.py)
