"""The web view's JSON API over real HTTP, on a log the real checkpoint wrote."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time

import pytest

from .world import TOKENS, XSS

ENDPOINTS = ["/api/me", "/api/decisions", "/api/decisions?after=0&wait=1", "/api/runs", "/api/verify",
             "/api/stats", "/api/nothing-here"]


def test_no_credential_or_a_wrong_one_gets_401_and_nothing_else(shared_world):
    web, story = shared_world.web, shared_world.story
    for path in [*ENDPOINTS, f"/api/runs/{story.parent}"]:
        for token in (None, "", "not-a-token-0123456789", TOKENS["carol"] + "x", "Basic " + TOKENS["carol"]):
            if token is None:
                status, headers, body = web.get(path, None)
            elif token.startswith("Basic "):  # the right secret in the wrong scheme
                import urllib.request

                request = urllib.request.Request(web.url + path, headers={"Authorization": token})
                try:
                    urllib.request.urlopen(request, timeout=10)
                    raise AssertionError("answered")
                except urllib.error.HTTPError as error:
                    status, headers, body = error.code, dict(error.headers), error.read()
            else:
                status, headers, body = web.get(path, token=token)
            assert status == 401, (path, token, status)
            assert json.loads(body) == {"code": "unauthenticated"}, body
            assert headers["WWW-Authenticate"].startswith("Bearer")
            assert story.parent.encode() not in body


def test_a_credential_that_may_read_nothing_is_refused_with_its_stable_code(shared_world):
    web = shared_world.web
    status, _, body = web.get("/api/decisions", "driver")  # a principal without an audit right
    assert (status, json.loads(body)["code"]) == (403, "caller_not_permitted")
    status, _, body = web.get("/api/decisions", "mallory")  # may audit acme, but is no auditor there
    assert (status, json.loads(body)["code"]) == (403, "role_required")
    assert b"records" not in body


def test_each_auditor_sees_only_their_tenants_records(shared_world):
    web, story = shared_world.web, shared_world.story
    acme = web.json("/api/decisions?limit=1000", "carol")["records"]
    globex = web.json("/api/decisions?limit=1000", "erin")["records"]
    assert acme and {r["tenant"] for r in acme} == {"acme"}
    assert globex and {r["tenant"] for r in globex} == {"globex"}
    assert story.globex_run not in json.dumps(acme) and story.parent not in json.dumps(globex)
    # another tenant's run is as absent as a made-up one
    for who, run in (("carol", story.globex_run), ("erin", story.parent), ("erin", story.child)):
        status, _, body = web.get(f"/api/runs/{run}", who)
        assert (status, json.loads(body)) == (404, {"code": "not_found", "message": "no such run"})
    assert web.get("/api/runs/run-made-up", "erin")[::2] == web.get(f"/api/runs/{story.parent}", "erin")[::2]
    # asking for the other tenant by name, or by a text of theirs, finds nothing either
    assert web.json("/api/decisions?tenant=acme", "erin")["records"] == []
    assert web.json(f"/api/decisions?text={story.parent}", "erin")["records"] == []
    assert web.json(f"/api/decisions?run={story.parent}", "erin")["records"] == []
    assert [r["run_id"] for r in web.json("/api/runs", "erin")["runs"]] == [story.globex_run]
    assert [r["run_id"] for r in web.json("/api/runs", "carol")["runs"]] == [story.parent]
    assert {v["agent"] for v in web.json("/api/stats", "erin")["versions"]} == {"helpdesk"}
    assert {v["agent"] for v in web.json("/api/stats", "carol")["versions"]} == {"recon", "triage"}


def test_the_stream_filters_and_pages(shared_world):
    web, story = shared_world.web, shared_world.story
    halts = web.json("/api/decisions?verdict=halt")["records"]
    assert [(r["code"], r["run_id"]) for r in halts] == [("breaker_tokens", story.child)]
    child = web.json(f"/api/decisions?run={story.child}")["records"]
    assert child and {r["run_id"] for r in child} == {story.child}
    tree = web.json(f"/api/decisions?tree={story.parent}")["records"]
    assert {r["run_id"] for r in tree} == {story.parent, story.child}
    asked = web.json("/api/decisions?tool=create_task_from_template&verdict=REQUIRE_APPROVAL")["records"]
    assert [r["decision_id"] for r in asked] == [story.asked]
    approvals = web.json("/api/decisions?approver=carol")["records"]
    assert [(r["action"], r["arguments"]["decision_id"]) for r in approvals] == [("approval", story.asked)]
    # the newest two, then paging on from the start by cursor
    everything = web.json("/api/decisions?limit=1000")["records"]
    newest = web.json("/api/decisions?limit=2")
    assert newest["records"] == everything[-2:] and newest["more"] is True
    # the cursor is the head seen, past records carol may not read: a poll need not scan them again
    assert newest["cursor"] == web.json("/api/verify")["head_seq"] > everything[-1]["seq"]
    first = web.json("/api/decisions?after=0&limit=3")
    assert first["records"] == everything[:3] and first["more"] and first["cursor"] == everything[2]["seq"]
    rest = web.json(f"/api/decisions?after={first['cursor']}&limit=1000")
    assert first["records"] + rest["records"] == everything and not rest["more"]


def test_a_long_poll_answers_with_the_decision_recorded_while_it_waited(world):
    web, cp = world.web, world.checkpoint
    cursor = web.json("/api/decisions?limit=1")["cursor"]
    answers: list = []
    poll = threading.Thread(target=lambda: answers.append(
        web.json(f"/api/decisions?after={cursor}&wait=20&tool=list_templates")))
    poll.start()
    time.sleep(0.3)  # let the poll start waiting (the test passes without it too, by the cursor)
    run = cp.start_run("recon")
    resp = cp.call(run.run_token, "list_templates", {})
    poll.join(timeout=30)
    got = answers[0]["records"]
    if not got:  # the poll saw only the start_run commit: the cursor moved on, ask again
        got = web.json(f"/api/decisions?after={answers[0]['cursor']}&wait=20&tool=list_templates")["records"]
    assert [r["decision_id"] for r in got] == [resp.decision_id]


@pytest.mark.parametrize("query", [
    "/api/decisions?verdcit=DENY",  # a misspelt filter must not widen the query
    "/api/decisions?limit=0", "/api/decisions?limit=1001", "/api/decisions?limit=ten",
    "/api/decisions?after=-1", "/api/decisions?wait=26", "/api/decisions?verdict=MAYBE",
    "/api/decisions?agent=a&agent=b", "/api/decisions?text=" + "x" * 257, "/api/decisions?since=someday",
    "/api/runs?limit=501", "/api/verify?deep=1", "/api/me?x=1",
    # digits only by str.isdigit(): '²' used to end the request without an answer, '١' read as 1
    "/api/decisions?limit=%C2%B2", "/api/decisions?after=%D9%A1",
    # more fields than the parser takes used to end the request without an answer too
    "/api/decisions?" + "&".join(f"f{i}=1" for i in range(65)),
])
def test_bad_parameters_are_refused_with_a_stable_code(shared_world, query):
    status, _, body = shared_world.web.get(query)
    assert (status, json.loads(body)["code"]) == (400, "invalid_request"), body


def test_there_is_nothing_to_write(shared_world):
    web, cp = shared_world.web, shared_world.checkpoint
    before = web.json("/api/verify")["head_seq"]
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/api/decisions", f"/api/runs/{shared_world.story.parent}", "/"):
            status, headers, _ = web.get(path, method=method)
            assert status == 405 and headers["Allow"] == "GET, HEAD", (method, path)
    assert web.json("/api/verify")["head_seq"] == before == cp.server.service.log.head()[0]


def test_every_answer_has_a_content_security_policy(shared_world):
    web = shared_world.web
    for path, who in (("/", None), ("/app.js", None), ("/app.css", None), ("/api/me", "carol"), ("/api/me", None)):
        status, headers, body = web.get(path, who)
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe" not in csp
        assert headers["X-Content-Type-Options"] == "nosniff"
    assert web.get("/api/me")[1]["Cache-Control"] == "no-store"
    page = web.get("/", None)[2].decode()
    # the page's only script is the file: nothing inline for a CSP to have to allow
    assert page.count("<script") == 1 and '<script src="/app.js"' in page
    assert not re.search(r"\son[a-z]+\s*=", page)  # no inline event handlers either
    assert "http://" not in page and "https://" not in page  # no CDN: the machine may be offline
    assert ".innerHTML" not in web.get("/app.js", None)[2].decode()


def test_a_hostile_argument_is_data_in_the_api(shared_world):
    records = shared_world.web.json("/api/decisions?limit=1000")["records"]
    hostile = [r for r in records if r["decision_id"] == shared_world.story.xss_decision]
    assert hostile and hostile[0]["arguments"] == {"task_id": XSS}
    status, headers, body = shared_world.web.get("/api/decisions?limit=1000")
    assert headers["Content-Type"] == "application/json" and b"<script>" not in body  # \u003c in JSON


def test_a_run_shows_its_tree_trips_and_approvals(shared_world):
    web, story = shared_world.web, shared_world.story
    parent = web.json(f"/api/runs/{story.parent}")
    assert [(n["run_id"], n["parent_run_id"]) for n in parent["tree"]] == [(story.parent, None),
                                                                            (story.child, story.parent)]
    assert {n["run_id"]: n["status"] for n in parent["tree"]} == {story.parent: "succeeded", story.child: "paused"}
    assert [(r["verdict"], r["action"]) for r in parent["approvals"]] == [("REQUIRE_APPROVAL", "tool_call"),
                                                                          ("ALLOW", "approval")]
    assert parent["approvals"][1]["caller"] == "carol" and parent["breaker_trips"] == []
    assert {r["run_id"] for r in parent["timeline"]} == {story.parent} and not parent["truncated"]
    child = web.json(f"/api/runs/{story.child}")
    assert child["root_run_id"] == story.parent and child["tree"] == parent["tree"]
    assert [(r["code"], r["verdict"]) for r in child["breaker_trips"]] == [("breaker_tokens", "HALT")]


def test_the_chain_status_turns_broken_when_a_record_is_edited(world):
    web, cp = world.web, world.checkpoint
    ok = web.json("/api/verify")
    assert ok["ok"] and ok["checked"] == cp.server.service.log.head()[0]
    with sqlite3.connect(cp.log_path) as db:
        db.execute("UPDATE decisions SET reason = 'nothing to see' WHERE seq = 5")
    # the status is walked again once the last walk is ten of its own durations old
    assert _eventually(lambda: not web.json("/api/verify")["ok"])
    broken = web.json("/api/verify")
    assert (broken["ok"], broken["broken_seq"], broken["reason"]) == (False, 5, "hash_mismatch")
    assert "nothing to see" not in json.dumps(broken)  # seq and hashes, no record content


def test_records_deleted_from_the_end_show_against_the_signed_heads(world):
    web, cp = world.web, world.checkpoint
    cp.stop()  # the checkpoint signs its head as it stops
    whole = web.json("/api/verify")
    assert whole["ok"] and whole["anchors"] >= 1 and "own key" in whole["anchors_note"]
    last = whole["head_seq"]
    with sqlite3.connect(cp.log_path) as db:
        db.execute("DELETE FROM decisions WHERE seq = ?", (last,))
    assert _eventually(lambda: not web.json("/api/verify")["ok"])
    cut = web.json("/api/verify")
    # a shorter chain is still whole: only the signed head tells
    assert (cut["ok"], cut["reason"], cut["broken_seq"]) == (False, "truncated", last)


def test_a_signed_head_that_was_altered_breaks_the_status(world):
    web, cp = world.web, world.checkpoint
    cp.stop()
    heads = cp.data / "decisions.heads.jsonl"
    line = json.loads(heads.read_text().splitlines()[-1])
    line["seq"] -= 1  # an anchor moved back, to hide what came after it
    heads.write_text(heads.read_text() + json.dumps(line) + "\n")
    status = web.json("/api/verify")
    assert (status["ok"], status["reason"]) == (False, "anchor_signature") and "does not verify" in status["detail"]


def test_a_revoked_token_or_role_is_refused_without_a_restart(world):
    web = world.web
    assert web.get("/api/me", "carol")[0] == 200
    acme = world.policies / "tenants" / "acme.yaml"
    acme.write_text(acme.read_text().replace("auditor: [bob, carol]", "auditor: [bob]"))
    assert _eventually(lambda: web.get("/api/me", "carol")[0] == 403)
    assert json.loads(web.get("/api/me", "carol")[2])["code"] == "role_required"
    world.tokens.write_text("".join(f"{n} {t}\n" for n, t in TOKENS.items() if n != "erin"))
    assert web.get("/api/me", "erin")[0] == 401  # the token file is looked at on every request
    world.tokens.unlink()
    assert web.get("/api/me", "driver")[0] == 401  # no token file: nobody is let in


def test_a_policy_edit_that_does_not_load_keeps_the_rights_that_did(world):
    web = world.web
    acme = world.policies / "tenants" / "acme.yaml"
    acme.write_text(acme.read_text() + "\nnot_a_field: 1\n")
    time.sleep(0.3)  # past the reload interval: the broken edit is tried, and kept out
    assert web.get("/api/me", "carol")[0] == 200


def test_records_a_new_run_writes_are_seen_by_the_stats(world):
    web, cp = world.web, world.checkpoint
    before = {v["agent"]: v for v in web.json("/api/stats")["versions"]}["recon"]
    run = cp.start_run("recon")
    cp.end(run.run_token, "failed", "plan_refused", 10)
    after = {v["agent"]: v for v in web.json("/api/stats")["versions"]}["recon"]
    assert (after["runs"], after["failed"]) == (before["runs"] + 1, before["failed"] + 1)


def _eventually(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False



def test_the_chain_is_walked_at_most_once_an_interval_and_shared(world):
    from checkpoint.audit.web.views import DecisionViews

    views = DecisionViews(world.checkpoint.log_path, verify_interval=3600)
    first = views.verify()
    assert first["ok"] and first["walk_seconds"] >= 0
    with sqlite3.connect(world.checkpoint.log_path) as db:
        db.execute("UPDATE decisions SET reason = 'edited' WHERE seq = 2")
    assert views.verify() is first  # within the interval: the last walk's status, not another walk
    assert DecisionViews(world.checkpoint.log_path, verify_interval=3600).verify()["reason"] == "hash_mismatch"


def test_the_page_reads_across_sealed_segments(world):
    """After `warden audit rotate` the records live in a sealed segment: the stream, a run's tree
    and the chain status read them there as before."""
    from warden.cli import main

    web, story, cp = world.web, world.story, world.checkpoint
    before = web.json("/api/decisions?limit=500")["records"]
    tree = web.json(f"/api/runs/{story.parent}")["tree"]
    assert main(["audit", "rotate", "--log", str(cp.log_path)]) == 0
    assert any((cp.log_path.parent / "decisions.d").glob("segment-*.db"))
    after = web.json("/api/decisions?limit=500")["records"]
    assert [r["seq"] for r in after] == [r["seq"] for r in before] and len(after) > 5
    assert web.json(f"/api/runs/{story.parent}")["tree"] == tree
    runs = web.json("/api/runs")["runs"]
    assert story.parent in {r["run_id"] for r in runs}
    assert _eventually(lambda: web.json("/api/verify")["ok"])
