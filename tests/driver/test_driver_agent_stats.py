"""Per-version statistics from runs through the real loop (checkpoint, toolrunner in Docker, a
scripted model): every way a run stops is an `end` on the checkpoint's record, and the figures of
two versions of one agent come from that record alone, across a restart of the checkpoint."""

from __future__ import annotations

import hashlib
import urllib.request

import pytest
from driver_harness import CHECKPOINT_TOKEN, PERSON_TOKEN, PLAN, call, final, goal, kinds

from checkpoint.server.app import create_server
from driver.clients import CheckpointClient
from warden.auth import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb

SCAN = call("create_task_from_template", template="web", target="web.lab.example.com")
SUCCEEDS = [PLAN, SCAN, call("get_task", task_id="task-abc"), final(reported="status succeeded")]
# as tests/driver/conftest.py gives them to its checkpoint
TOKENS = {hashlib.sha256(CHECKPOINT_TOKEN.encode()).digest(): "driver",
          hashlib.sha256(PERSON_TOKEN.encode()).digest(): "bob"}
BAD_PLAN = {"action": "tool_call", "tool": "propose_plan", "arguments": {"steps": [
    {"id": "a", "tool": "list_templates"}, {"id": "b", "tool": "cancel_task"}]}}


def stats(address: str) -> pb.AgentStatsResponse:
    """What bob (an operator of acme, with his own credential) reads."""
    person = CheckpointClient(address, timeout=10, token=PERSON_TOKEN)
    try:
        return person._call("AgentStats", pb.AgentStatsRequest(agent="recon"))
    finally:
        person.close()


def figures(answer: pb.AgentStatsResponse) -> dict[str, dict]:
    return {v.version: {"live": v.live, "runs": v.runs, "succeeded": v.succeeded, "paused": v.paused,
                        "pauses": v.pauses, "failed": v.failed, "cancelled": v.cancelled, "open": v.open,
                        "breaker_trips": dict(v.breaker_trips), "tokens": v.tokens,
                        "runs_with_tokens": v.runs_with_tokens} for v in answer.versions}


def ends(server, run_id: str) -> list[tuple[str, str]]:
    return [(r["arguments"]["details"]["status"], r["arguments"]["details"].get("instead_of", ""))
            for r in server.log.read(run_id=run_id) if r["action"] == "end"]


def test_two_versions_compared_from_the_record_and_recomputed_after_a_restart(stack, checkpoint_server,
                                                                              tmp_path, grant_key):
    d = stack.driver()
    old = checkpoint_server.store.current.agents["recon"].version
    ok = stack.start(d, SUCCEEDS)
    # a breaker pauses it, a person raises the ceiling, it succeeds: paused once, then succeeded
    resumed = d.run_until_stopped(d.start_run("recon", goal(turns=2), owner="alice", provider="scripted",
                                              provider_options={"script": SUCCEEDS}, spawn=False).run_id)
    assert resumed.code == "breaker_turns"
    d.resume(resumed.run_id, "alice", "carry on", {"turns": 10}, spawn=False)
    resumed = d.run_until_stopped(resumed.run_id)
    stuck = stack.start(d, [PLAN, call("list_templates")], goal(tokens=1))  # paused on a breaker, left so
    failed = stack.start(d, [BAD_PLAN])
    assert [r.status for r in (ok, resumed, stuck, failed)] == ["succeeded", "succeeded", "paused", "failed"]
    assert stuck.code == "breaker_tokens" and failed.code == "plan_refused"

    # a narrowing edit of the policy file: a second version, live for new runs
    recon = stack.policy_dir / "agents" / "recon.yaml"
    recon.write_text(recon.read_text().replace("tokens: 200000", "tokens: 100000"))
    assert checkpoint_server.store.reload()
    new = checkpoint_server.store.current.agents["recon"].version
    assert new != old
    ok2 = stack.start(d, SUCCEEDS)
    cancelled = d.cancel(d.start_run("recon", goal(), owner="alice", provider="scripted",
                                     provider_options={"script": SUCCEEDS}, spawn=False).run_id, "alice")
    assert (ok2.agent_version, ok2.status, cancelled.status) == (new, "succeeded", "cancelled")

    # every stop of the loop is an end on the record, the last one is how the run ended
    assert ends(checkpoint_server, ok.run_id) == [("succeeded", "")]
    assert ends(checkpoint_server, resumed.run_id) == [("paused", ""), ("succeeded", "")]
    assert ends(checkpoint_server, stuck.run_id) == [("paused", "")]
    assert ends(checkpoint_server, failed.run_id) == [("failed", "")]
    assert ends(checkpoint_server, cancelled.run_id) == [("cancelled", "")]
    [end] = [r for r in checkpoint_server.log.read(run_id=stuck.run_id) if r["action"] == "end"]
    assert end["arguments"]["details"] == {"status": "paused", "code": "breaker_tokens",
                                           "tokens": stuck.total_tokens, "turns": stuck.total_turns}
    assert (end["agent"], end["agent_version"], end["principal"], end["arguments"]["person"]) == (
        "recon", old, "driver", "")

    v1_runs = [d.store.run(r.run_id) for r in (ok, resumed, stuck, failed)]
    v2_runs = [d.store.run(r.run_id) for r in (ok2, cancelled)]
    expected = {
        old: {"live": False, "runs": 4, "succeeded": 2, "paused": 2, "pauses": 2, "failed": 1, "cancelled": 0,
              "open": 1, "breaker_trips": {"turns": 1, "tokens": 1},
              "tokens": sum(r.total_tokens for r in v1_runs), "runs_with_tokens": 4},
        new: {"live": True, "runs": 2, "succeeded": 1, "paused": 0, "pauses": 0, "failed": 0, "cancelled": 1,
              "open": 0, "breaker_trips": {}, "tokens": sum(r.total_tokens for r in v2_runs),
              "runs_with_tokens": 2},
    }
    answer = stats(checkpoint_server.address)
    assert [v.version for v in answer.versions] == [old, new] and figures(answer) == expected
    assert expected[old]["tokens"] > 0
    assert answer.versions[0].average_tokens == pytest.approx(expected[old]["tokens"] / 4)

    # a new checkpoint on the same data folder: the figures are recomputed from the log
    checkpoint_server.stop(0.5)
    again, port = create_server("127.0.0.1:0", policy_dir=stack.policy_dir, data_dir=tmp_path / "cp",
                                key=grant_key, auth=AuthPolicy(tokens=TOKENS), watch_interval=None,
                                metrics_address="127.0.0.1:0")
    again.start()
    try:
        assert figures(stats(f"127.0.0.1:{port}")) == expected
        with urllib.request.urlopen(f"http://127.0.0.1:{again.metrics_port}/metrics", timeout=5) as page:
            text = page.read().decode()
        assert f'warden_checkpoint_agent_runs_succeeded{{agent="recon",version="{old}"}} 2.0' in text
        assert f'warden_checkpoint_agent_breaker_trips{{agent="recon",breaker="turns",version="{old}"}} 1.0' in text
        assert f'warden_checkpoint_agent_runs_cancelled{{agent="recon",version="{new}"}} 1.0' in text
    finally:
        again.stop(0.5)


def test_an_end_that_loses_a_race_to_a_cancel_is_corrected_on_the_record(stack, checkpoint_server):
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", provider_options={"script": SUCCEEDS},
                      spawn=False)
    d.cancel(run.run_id, "alice", "enough")
    # the loop, late: it concludes, then pauses, a run a person cancelled meanwhile
    d._finish(run, "succeeded", "succeeded", "done")
    d._pause(run, "breaker_turns", "too many turns")
    assert d.store.run(run.run_id).status == "cancelled"
    assert ends(checkpoint_server, run.run_id) == [
        ("cancelled", ""), ("succeeded", ""), ("cancelled", "succeeded"), ("paused", ""), ("cancelled", "paused")]
    [v] = stats(checkpoint_server.address).versions
    assert (v.runs, v.cancelled, v.succeeded, v.paused, v.pauses, v.open) == (1, 1, 0, 0, 0, 0)


def test_an_end_the_checkpoint_cannot_record_is_an_event_and_the_run_still_stops(stack, checkpoint_server):
    d = stack.driver()
    run = d.start_run("recon", goal(), owner="alice", provider="scripted", provider_options={"script": SUCCEEDS},
                      spawn=False)
    checkpoint_server.stop(0.5)
    run = d.run_until_stopped(run.run_id)
    assert (run.status, run.code) == ("paused", "checkpoint_unavailable")
    [unrecorded] = [e.data for e in d.store.events(run.run_id) if e.kind == "act_unrecorded"]
    assert (unrecorded["act"], unrecorded["status"], unrecorded["code"]) == ("end", "paused", "checkpoint_unavailable")
    assert "checkpoint" in unrecorded["problem"]
    assert kinds(d, run.run_id)[-2:] == ["act_unrecorded", "run_paused"]
