"""Shadow rules (issue 11, "Shadow mode"): evaluated and recorded beside the enforced answer,
never enforced; `warden audit query --shadow-flips`; promoting is an edit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from checkpoint.policy import load_policy_dir
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

from .helpers import tool_call

SHADOW_RULE = """
---
kind: Rule
name: no-task-reads
description: a rule on trial
effect: deny_if
condition: 'args.task_id.startsWith("task-")'
tools: [get_task]
reason: task reads are under review
mode: shadow
"""


@pytest.fixture
def shadowed(policy_dir: Path) -> Path:
    path = policy_dir / "rules" / "recon.yaml"
    path.write_text(path.read_text() + SHADOW_RULE)
    return policy_dir


def _records(running) -> list[dict]:
    return [r for r in running.records() if r["action"] == "tool_call"]


def test_a_holding_shadow_deny_leaves_the_call_allowed_and_records_the_deny(start, shadowed, capsys):
    running = start()
    stub = running.stub()
    version = running.version("recon")
    got = stub.Check(running.with_run(tool_call("recon", version, "get_task", {"task_id": "task-1"})), timeout=5)
    assert got.verdict == pb.VERDICT_ALLOW and got.code == "allowed" and got.HasField("grant")
    other = stub.Check(running.with_run(tool_call("recon", version, "list_templates", {})), timeout=5)
    assert other.verdict == pb.VERDICT_ALLOW
    first, second = _records(running)
    assert (first["verdict"], first["code"]) == ("ALLOW", "allowed")
    assert (first["shadow_verdict"], first["shadow_code"], first["shadow_rule"]) == (
        "DENY", "rule_denied", "rule:no-task-reads")
    # a call the shadow rule does not touch: the same answer both ways, no flip
    assert (second["shadow_verdict"], second["shadow_code"]) == ("ALLOW", "allowed")

    capsys.readouterr()
    assert main(["audit", "query", "--data", str(running.data), "--shadow-flips", "--format", "jsonl"]) == 0
    flips = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["tool"], r["verdict"], r["shadow_verdict"]) for r in flips] == [("get_task", "ALLOW", "DENY")]
    assert main(["audit", "query", "--data", str(running.data), "--shadow-flips"]) == 0
    assert "rule:no-task-reads" in capsys.readouterr().out
    assert main(["audit", "verify", "--data", str(running.data)]) == 0  # the shadow columns are hashed


def test_no_shadow_rule_records_no_shadow_answer(checkpoint):
    version = checkpoint.version("recon")
    checkpoint.stub().Check(checkpoint.with_run(tool_call("recon", version, "get_task", {"task_id": "task-1"})),
                            timeout=5)
    (record,) = _records(checkpoint)
    assert record["shadow_verdict"] is record["shadow_code"] is record["shadow_rule"] is None


def test_shadow_rules_never_enforce_and_promoting_is_an_edit(shadowed):
    from checkpoint.engine import decide

    policies = load_policy_dir(shadowed)
    version = policies.agents["recon"].version
    request = tool_call("recon", version, "get_task", {"task_id": "task-1"})
    assert policies.has_shadow
    assert decide(policies, request).verdict == pb.VERDICT_ALLOW  # what is enforced
    shadow = decide(policies.shadow(), request)
    assert (shadow.verdict, shadow.code, shadow.rule) == (pb.VERDICT_DENY, "rule_denied", "rule:no-task-reads")
    assert policies.shadow() is policies.shadow()  # built once per policy set
    # promote: remove `mode: shadow`, and the same call is refused
    path = shadowed / "rules" / "recon.yaml"
    path.write_text(path.read_text().replace("mode: shadow\n", ""))
    promoted = load_policy_dir(shadowed)
    assert not promoted.has_shadow
    got = decide(promoted, tool_call("recon", promoted.agents["recon"].version, "get_task", {"task_id": "task-1"}))
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "rule_denied")


def test_the_shadow_answer_is_held_to_a_pinned_revision_like_the_enforced_one(shadowed):
    from checkpoint.server.service import _shadow_answer

    policies = load_policy_dir(shadowed)
    version = policies.agents["recon"].version
    request = tool_call("recon", version, "list_templates", {})
    assert _shadow_answer(policies, request, "", frozenset(), None, None, "rev") == ("ALLOW", "allowed", "allow")
    # the run is pinned to a revision that refused this call: the shadow answer does not widen it
    pinned = pb.CheckResponse(verdict=pb.VERDICT_DENY, code="tool_not_allowed", rule="allowlist")
    assert _shadow_answer(policies, request, "", frozenset(), None, pinned, "rev") == (
        "DENY", "tool_not_allowed", "allowlist")
