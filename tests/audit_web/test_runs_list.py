"""The runs list's status, counts, filters and time range, and a run's refusals, over real HTTP
against the web view of a real checkpoint's log."""

from __future__ import annotations

import json
from urllib.parse import quote

import pytest

from warden.checkpoint.v1 import checkpoint_pb2 as pb


def _runs(web, query: str = "", who: str = "carol") -> list[dict]:
    return web.json("/api/runs" + query, who)["runs"]


def test_each_run_has_its_status_and_counts_as_its_records_show(shared_world):
    web, story = shared_world.web, shared_world.story
    [parent] = _runs(web)
    records = web.json(f"/api/decisions?run={story.parent}&limit=1000")["records"]
    assert parent["run_id"] == story.parent and parent["status"] == "succeeded"
    assert parent["decisions"] == len(records) > 0
    assert parent["denied"] == sum(r["verdict"] == "DENY" for r in records)
    assert parent["halted"] == sum(r["verdict"] == "HALT" for r in records)


def test_a_run_lists_its_refusals(shared_world):
    web, story = shared_world.web, shared_world.story
    child = web.json(f"/api/runs/{story.child}")
    assert [(r["verdict"], r["code"]) for r in child["refusals"]] == [("HALT", "breaker_tokens")]
    assert web.json(f"/api/runs/{story.parent}")["refusals"] == [
        r for r in web.json(f"/api/runs/{story.parent}")["timeline"] if r["verdict"] in ("DENY", "HALT")]


def test_filters_status_refusals_and_time_range(world):
    web, cp, story = world.web, world.checkpoint, world.story
    [parent] = _runs(web)
    denied_run = cp.start_run("recon")
    refused = cp.call(denied_run.run_token, "no_such_tool_at_all", {})
    assert refused.verdict == pb.VERDICT_DENY, refused
    runs = {r["run_id"]: r for r in _runs(web)}
    assert set(runs) == {story.parent, denied_run.run_id}
    fresh = runs[denied_run.run_id]
    assert (fresh["status"], fresh["decisions"], fresh["denied"], fresh["halted"]) == ("open", 2, 1, 0)
    assert [r["run_id"] for r in _runs(web, "?status=open")] == [denied_run.run_id]  # before the clean run
    assert [r["run_id"] for r in _runs(web, "?status=succeeded")] == [story.parent]
    assert _runs(web, "?status=failed") == []
    clean_run = cp.start_run("recon")
    assert cp.call(clean_run.run_token, "get_task", {"task_id": "task-1"}).verdict == pb.VERDICT_ALLOW
    with_refusals = {r["run_id"] for r in _runs(web) if r["denied"] or r["halted"]}
    assert denied_run.run_id in with_refusals and clean_run.run_id not in with_refusals
    assert {r["run_id"] for r in _runs(web, "?refused=1")} == with_refusals
    assert len(_runs(web, "?refused=0")) == 3
    # the time range bounds when the run started: the newer run's start is after the parent's
    since = quote(fresh["time"])
    assert [r["run_id"] for r in _runs(web, f"?since={since}")] == [clean_run.run_id, denied_run.run_id]
    assert [r["run_id"] for r in _runs(web, f"?until={since}")] == [story.parent]
    assert _runs(web, "?since=2999-01-01") == []
    assert [r["run_id"] for r in _runs(web, "?agent=recon&person=alice&until=2999-01-01")] == [
        clean_run.run_id, denied_run.run_id, story.parent]
    assert _runs(web, "?agent=triage") == []
    # another tenant's open run stays out of carol's list, whatever the filter; erin sees only it
    assert story.globex_run not in {r["run_id"] for r in _runs(web, "?status=open&limit=500")}
    assert [r["run_id"] for r in _runs(web, "?status=open", "erin")] == [story.globex_run]
    assert _runs(web, "?refused=1", "erin") == []


@pytest.mark.parametrize("query", ["?status=OPEN", "?status=bogus", "?status=open%20", "?refused=yes",
                                   "?refused=true", "?since=last%20week", "?until=2026-01-31T09:00",
                                   "?tenant=globex", "?verdict=DENY", "?status=open&status=failed"])
def test_a_bad_runs_query_is_refused_not_widened(shared_world, query):
    status, _, body = shared_world.web.get("/api/runs" + query)
    assert status == 400, (query, body)
    assert json.loads(body)["code"] == "invalid_request"


def test_the_decisions_since_and_until(shared_world):
    web = shared_world.web
    every = web.json("/api/decisions?limit=1000")["records"]
    middle = every[len(every) // 2]["time"]
    after = web.json(f"/api/decisions?limit=1000&since={quote(middle)}")["records"]
    before = web.json(f"/api/decisions?limit=1000&until={quote(middle)}")["records"]
    assert after and before and len(after) + len(before) == len(every)
    assert all(r["time"] >= middle for r in after) and all(r["time"] < middle for r in before)
