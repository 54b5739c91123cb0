"""checkpoint.replay on hand-made records: what a replay can rebuild, and what it refuses to guess."""

from __future__ import annotations

from ckpt_helpers import FOLDERS

from checkpoint.policy import load_policy_dir
from checkpoint.replay import diff, render

SHIPPED = load_policy_dir(FOLDERS["shipped"])
RECON = SHIPPED.agents["recon"].version
CHAIN = [{"kind": "person", "id": "alice"}, {"kind": "agent", "id": "recon", "agent_version": RECON, "run_id": "r1"}]
START = {"decision_id": "s1", "time": "2026-01-05T10:00:00.000000Z", "tenant": "acme", "run_id": "r1",
         "root_run_id": "r1", "actor_chain": CHAIN, "action": "start_run", "arguments": {"mode": "interactive"},
         "verdict": "ALLOW", "code": "allowed", "rule": "start_run"}


def call(decision_id: str, tool: str, args: dict, verdict: str = "ALLOW", code: str = "allowed",
         rule: str = "allow", **extra) -> dict:
    return {"decision_id": decision_id, "time": "2026-01-05T10:00:01.000000Z", "tenant": "acme", "run_id": "r1",
            "root_run_id": "r1", "actor_chain": CHAIN, "agent": "recon", "agent_version": RECON,
            "action": "tool_call", "tool": tool, "arguments": args, "verdict": verdict, "code": code, "rule": rule,
            **extra}


SCAN = {"template": "web-basic", "target": "10.20.0.0/24"}


def test_records_replay_to_their_recorded_answers():
    records = [START, call("d1", "get_task", {"task_id": "task-1"}),
               call("d2", "cancel_task", {"task_id": "task-1"}, "DENY", "tool_not_allowed", "allowlist")]
    report = diff(records, SHIPPED)
    assert report.replayed == 2 and report.flips == [] and report.acts == {"start_run": 1}
    assert "no decision would change" in render(report)


def test_what_cannot_be_rebuilt_is_counted_with_its_reason():
    records = [
        call("h", "get_task", {"task_id": "task-1"}, "HALT", "breaker_tool_calls", "breaker.tool_calls"),
        call("x", "get_task", {"sha256": "ab" * 32, "bytes": 40}, "DENY", "unknown_tool", "request.tool"),
        call("t", "get_task", {"task_id": "task-1"}, "DENY", "run_token_invalid", "run_token"),
        call("l", "get_task", {"task_id": "task-1"}, "DENY", "learning_blocked", "learning:l-1"),
        {**call("o", "get_task", {"task_id": "task-1"}), "run_id": "r2", "root_run_id": "r2"},  # no start_run
        {**START, "action": "plan", "decision_id": "p", "arguments": {"steps": [{"id": "1", "tool": "get_task"}]}},
    ]
    report = diff([START, *records], SHIPPED)
    assert report.replayed == 0 and not report.flips
    assert report.not_replayable == {
        "decided by a breaker over counters the log does not keep": 1,
        "the arguments were kept only as a hash (unknown tool or over the size cap)": 1,
        "refused outside the policy rules (run_token)": 1,
        "decided by a learning (the learning store's data, not the policy files)": 1,
        "the run's mode is not known (its start_run record is not in the input)": 1,
        "a plan's steps are recorded without their arguments": 1,
    }


def test_an_approved_call_replays_with_the_rules_its_approval_answered():
    asked = call("a1", "create_task_from_template", SCAN, "REQUIRE_APPROVAL", "approval_required",
                 "rule:wide-scans-need-approval", call_digest="dig", approval_rules="rule:wide-scans-need-approval")
    approved = call("a2", "create_task_from_template", SCAN, "ALLOW", "allowed", "approval", call_digest="dig",
                    reason="approved by bob (decision a1)")
    report = diff([START, asked, approved], SHIPPED)
    assert report.replayed == 2 and report.flips == []
    alone = diff([START, approved], SHIPPED)  # the approval's question is not in the input: not guessed
    assert alone.replayed == 0 and list(alone.not_replayable) == [
        "approved: the REQUIRE_APPROVAL record its approval answered is not in the input"]


def test_a_background_run_replays_as_background():
    intrusive = {"template": "intrusive-bruteforce", "target": "www.lab.example.com"}
    background = {**START, "arguments": {"mode": "background"}}
    denied = call("b", "create_task_from_template", intrusive, "DENY", "rule_denied",
                  "rule:no-intrusive-templates-in-background")
    assert diff([background, denied], SHIPPED).flips == []
    flipped = diff([START, denied], SHIPPED).flips  # the same record in an interactive run would pass
    assert [(f.before.code, f.after.code) for f in flipped] == [("rule_denied", "allowed")]
