"""The checkpoint's own figures move when their event happens, scraped over real HTTP from a real
server: gRPC calls by method and status with their duration (unary and streams), shadow flips
(a shadow rule's answer differs from the enforced one), and the policy revision it serves."""

from __future__ import annotations

import re
import time
import urllib.request

import grpc
import pytest

from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import PERSON_TOKEN
from .helpers import tool_call

SHADOW_RULE = """
---
kind: Rule
name: no-task-reads
description: a rule on trial
effect: deny_if
condition: 'args.task_id == "task-13"'
tools: [get_task]
reason: task reads are under review
mode: shadow
"""


def scrape(running) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{running.server.metrics_port}/metrics", timeout=5).read()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.decode().splitlines()
            if line and not line.startswith("#")}


def calls(figures: dict[str, float], method: str, code: str) -> float:
    return figures.get(f'warden_checkpoint_grpc_calls_total{{code="{code}",method="{method}"}}', 0.0)


def seconds_count(figures: dict[str, float], method: str) -> float:
    return figures.get(f'warden_checkpoint_grpc_call_seconds_count{{method="{method}"}}', 0.0)


def _check(running, task_id: str = "task-1", tool: str = "get_task") -> pb.CheckResponse:
    version = running.version("recon")
    return running.stub().Check(running.with_run(tool_call("recon", version, tool, {"task_id": task_id})), timeout=5)


def test_each_unary_call_is_counted_by_method_and_status_with_its_duration(start):
    running = start(metrics_address="127.0.0.1:0")
    before = scrape(running)
    assert calls(before, "Check", "OK") == 0 and seconds_count(before, "Check") == 0
    assert _check(running).verdict == pb.VERDICT_ALLOW  # a StartRun, then the Check
    after = scrape(running)
    assert calls(after, "Check", "OK") == 1 and calls(after, "StartRun", "OK") == 1
    assert seconds_count(after, "Check") == 1 and after['warden_checkpoint_grpc_call_seconds_sum{method="Check"}'] > 0

    # another identity: no token at all is UNAUTHENTICATED, counted under its own status
    with pytest.raises(grpc.RpcError) as refused:
        running.stub(None).Check(pb.CheckRequest(), timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # a request with no run context: INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as invalid:
        running.stub().Check(pb.CheckRequest(tool_call=pb.ToolCall(tool="get_task")), timeout=5)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    figures = scrape(running)
    assert calls(figures, "Check", "UNAUTHENTICATED") == 1
    assert calls(figures, "Check", "INVALID_ARGUMENT") == 1
    assert calls(figures, "Check", "OK") == 1  # the refusals are not OKs
    assert seconds_count(figures, "Check") == 3  # every call has its duration, whatever its status
    # a DENY is an answer, not an error status: OK
    assert _check(running, tool="cancel_task").verdict == pb.VERDICT_DENY
    assert calls(scrape(running), "Check", "OK") == 2


def test_streams_are_counted_once_each_when_they_end(start):
    running = start(metrics_address="127.0.0.1:0")
    version = running.version("recon")
    items = [pb.CheckStreamRequest(correlation_id=str(i), request=running.with_run(
        tool_call("recon", version, "get_task", {"task_id": f"task-{i}"}))) for i in range(3)]
    answers = list(running.stub().CheckStream(iter(items), timeout=10))
    assert [a.response.verdict for a in answers] == [pb.VERDICT_ALLOW] * 3
    # a watch that reads what is there and ends; one the caller may not open
    assert list(running.stub(PERSON_TOKEN).WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5))
    with pytest.raises(grpc.RpcError):
        list(running.stub().WatchDecisions(pb.WatchDecisionsRequest(no_follow=True), timeout=5))
    deadline = time.monotonic() + 5  # a stream's count is taken after its last answer left
    while True:
        figures = scrape(running)
        done = (calls(figures, "CheckStream", "OK"), calls(figures, "WatchDecisions", "OK"),
                calls(figures, "WatchDecisions", "PERMISSION_DENIED"))
        if done == (1, 1, 1) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert done == (1, 1, 1)
    assert seconds_count(figures, "CheckStream") == 1  # the stream, not its three items


def test_a_shadow_flip_is_counted_and_an_agreeing_shadow_is_not(start, policy_dir):
    path = policy_dir / "rules" / "recon.yaml"
    path.write_text(path.read_text() + SHADOW_RULE)
    running = start(metrics_address="127.0.0.1:0")
    flips = 'warden_checkpoint_shadow_flips_total{enforced="ALLOW",shadow="DENY"}'
    assert flips not in scrape(running)
    assert _check(running, task_id="task-1").verdict == pb.VERDICT_ALLOW  # the shadow rule agrees: no flip
    assert flips not in scrape(running)
    assert _check(running, task_id="task-13").verdict == pb.VERDICT_ALLOW  # enforced ALLOW, shadow DENY
    assert scrape(running)[flips] == 1
    # the same records `warden audit query --shadow-flips` lists: one
    flipped = [r for r in running.records() if r.get("shadow_verdict") and
               (r["shadow_verdict"], r["shadow_code"]) != (r["verdict"], r["code"])]
    assert len(flipped) == 1


def test_no_shadow_rules_no_flip_series(start):
    running = start(metrics_address="127.0.0.1:0")
    _check(running)
    assert not [k for k in scrape(running) if k.startswith("warden_checkpoint_shadow_flips_total")]


def _revisions(running) -> list[str]:
    return [re.search(r'revision="([^"]+)"', k).group(1) for k in scrape(running)
            if k.startswith("warden_policy_revision_info{")]


def test_the_policy_revision_is_a_label_that_follows_a_reload(start, policy_dir):
    running = start(metrics_address="127.0.0.1:0")
    first = running.server.store.current.revision
    figures = scrape(running)
    assert figures[f'warden_policy_revision_info{{process="checkpoint",revision="{first}"}}'] == 1
    path = policy_dir / "rules" / "recon.yaml"
    path.write_text(path.read_text() + SHADOW_RULE)  # an edit: a new revision, hot-reloaded
    deadline = time.monotonic() + 20
    while running.server.store.current.revision == first and time.monotonic() < deadline:
        time.sleep(0.05)
    second = running.server.store.current.revision
    assert second != first
    assert _revisions(running) == [second]  # only the one in force: the old label is gone


def test_a_broken_edit_keeps_the_revision_in_force(start, policy_dir):
    running = start(metrics_address="127.0.0.1:0")
    first = running.server.store.current.revision
    (policy_dir / "rules" / "recon.yaml").write_text("kind: Rule\nname: [broken\n")
    deadline = time.monotonic() + 20
    while scrape(running).get("warden_checkpoint_policy_last_reload_ok") != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert scrape(running)["warden_checkpoint_policy_last_reload_ok"] == 0
    assert _revisions(running) == [first]


def test_a_flip_whose_record_could_not_be_committed_is_not_counted(start, policy_dir):
    """The count is of recorded flips: an answer the log refused is DENY audit_unavailable, which
    differs from the shadow's DENY rule_denied in code only, and still no flip was recorded."""
    path = policy_dir / "rules" / "recon.yaml"
    path.write_text(path.read_text() + SHADOW_RULE)
    running = start(metrics_address="127.0.0.1:0")
    version = running.version("recon")
    request = running.with_run(tool_call("recon", version, "get_task", {"task_id": "task-13"}))
    running.server.log.close()  # the log can no longer take records
    answer = running.stub().Check(request, timeout=5)
    assert (answer.verdict, answer.code) == (pb.VERDICT_DENY, "audit_unavailable")
    figures = scrape(running)
    assert figures["warden_checkpoint_audit_write_failures_total"] == 1
    assert not [k for k in figures if k.startswith("warden_checkpoint_shadow_flips_total")]
