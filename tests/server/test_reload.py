"""Hot reload during traffic: a good edit swaps atomically, a broken one keeps the last good set."""

from __future__ import annotations

import json
import time
import urllib.request

from grpc_health.v1 import health_pb2, health_pb2_grpc

from checkpoint.server.app import RELOAD_HEALTH_NAME
from checkpoint.server.grpc_api import SERVICE_NAME
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .helpers import Traffic, tool_call

DENY_GET_TASK = """kind: Rule
name: freeze-get-task
effect: deny_if
condition: 'true'
tools: [get_task]
reason: frozen for the test
"""


def _wait(predicate, timeout: float = 60.0) -> None:  # a bound so a broken reload fails, not a timing
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_good_edit_swaps_atomically_under_traffic(checkpoint):
    old = checkpoint.server.store.current.revision
    request = checkpoint.with_run(tool_call("recon", checkpoint.version("recon"), "get_task", {"task_id": "task-1"}))
    with Traffic(checkpoint.stub(), request) as traffic:
        _wait(lambda: len(traffic.answers) > 20)
        (checkpoint.policies / "rules" / "freeze.yaml").write_text(DENY_GET_TASK)
        _wait(lambda: any(a.policy_revision != old for a in traffic.answers[-5:]))
        seen = len(traffic.answers)
        _wait(lambda: len(traffic.answers) > seen + 20)
    assert traffic.errors == []
    new = checkpoint.server.store.current.revision
    assert new != old
    by_revision = {old: set(), new: set()}
    for answer in traffic.answers:
        by_revision[answer.policy_revision].add((answer.verdict, answer.code))  # KeyError: a third revision
    assert by_revision[old] == {(pb.VERDICT_ALLOW, "allowed")}
    assert by_revision[new] == {(pb.VERDICT_DENY, "rule_denied")}
    # Once a client held an answer from the new set, no call sent after that was answered by the
    # old one (calls already in flight across the swap may still finish with it, in any order).
    first_new = min(received for _, received, a in traffic.timeline if a.policy_revision == new)
    late = [sent for sent, _, a in traffic.timeline if sent > first_new and a.policy_revision != new]
    assert late == [], f"{len(late)} call(s) sent after the swap was seen were answered by the old set"


def test_broken_edit_keeps_the_last_good_set(start):
    running = start(metrics_address="127.0.0.1:0")
    good = running.server.store.current.revision
    request = running.with_run(tool_call("recon", running.version("recon"), "get_task", {"task_id": "task-1"}))
    health = health_pb2_grpc.HealthStub(running.tcp(token=None))
    with Traffic(running.stub(), request, threads=2) as traffic:
        _wait(lambda: len(traffic.answers) > 10)
        (running.policies / "rules" / "broken.yaml").write_text(
            "kind: Rule\nname: broken\neffect: deny_if\ncondition: 'true'\nbogus: 1\nalso_bogus: 2\n"
        )
        _wait(lambda: not running.server.store.status.last_ok)
        seen = len(traffic.answers)
        _wait(lambda: len(traffic.answers) > seen + 10)
    assert traffic.errors == []
    assert {a.policy_revision for a in traffic.answers} == {good}
    assert {a.verdict for a in traffic.answers} == {pb.VERDICT_ALLOW}

    errors = running.server.store.status.errors
    assert len(errors) >= 2 and all("broken.yaml:" in e for e in errors)  # every error, with file:line
    assert (
        health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5).status
        == health_pb2.HealthCheckResponse.SERVING
    )
    def reload_health_status() -> int:
        return health.Check(health_pb2.HealthCheckRequest(service=RELOAD_HEALTH_NAME), timeout=5).status

    # Health and metrics follow the status through a listener, a moment later: wait for them.
    _wait(lambda: reload_health_status() == health_pb2.HealthCheckResponse.NOT_SERVING)
    assert reload_health_status() == health_pb2.HealthCheckResponse.NOT_SERVING

    base = f"http://127.0.0.1:{running.server.metrics_port}"
    details = json.loads(urllib.request.urlopen(base + "/healthz", timeout=5).read())
    assert details["policy_revision"] == good and details["last_reload_ok"] is False
    assert details["last_reload_errors"] == errors
    metrics = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
    assert 'warden_checkpoint_policy_reloads_total{result="error"} 1.0' in metrics
    assert "warden_checkpoint_policy_last_reload_ok 0.0" in metrics

    # Fixing the file recovers without a restart.
    (running.policies / "rules" / "broken.yaml").unlink()
    _wait(lambda: running.server.store.status.last_ok)

    _wait(lambda: reload_health_status() == health_pb2.HealthCheckResponse.SERVING)
    assert reload_health_status() == health_pb2.HealthCheckResponse.SERVING


def test_agent_edit_makes_a_new_version_and_pinned_runs_keep_the_old(checkpoint):
    old_version = checkpoint.version("recon")
    pinned_run = checkpoint.with_run(tool_call("recon", old_version, "get_task", {"task_id": "task-1"}))
    recon = checkpoint.policies / "agents" / "recon.yaml"
    recon.write_text(
        recon.read_text().replace(
            "allowlist: [create_task_from_template, get_task, list_templates]", "allowlist: [list_templates]"
        )
    )
    _wait(lambda: checkpoint.version("recon") != old_version)
    assert checkpoint.server.store.status.last_ok, checkpoint.server.store.status.errors
    new_version = checkpoint.version("recon")
    stub = checkpoint.stub()
    pinned = stub.Check(pinned_run, timeout=5)
    assert (pinned.verdict, pinned.agent_version) == (
        pb.VERDICT_ALLOW,
        old_version,
    )  # a run pinned before the edit
    started = checkpoint.start_run("recon")  # a run started now pins the new version
    assert started.agent.agent_version == new_version, started.decision
    fresh_request = tool_call("recon", new_version, "get_task", {"task_id": "task-1"})
    fresh_request.run.CopyFrom(pb.RunContext(run_token=started.run_token))
    fresh = stub.Check(fresh_request, timeout=5)
    assert (fresh.verdict, fresh.code, fresh.agent_version) == (pb.VERDICT_DENY, "tool_not_allowed", new_version)
    # the edit only narrowed: a new run may not pin the old version by name (that would give back
    # what the edit took away; docs/catalog.md, "narrowed"), though it can still be read
    refused = checkpoint.start_run("recon", old_version)
    assert (refused.decision.verdict, refused.decision.code) == (pb.VERDICT_DENY, "agent_version_not_approved")
    resolved = stub.ResolveAgent(pb.ResolveAgentRequest(agent="recon", agent_version=old_version), timeout=5)
    assert resolved.agent_version == old_version
