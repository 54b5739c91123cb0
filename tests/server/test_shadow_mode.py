"""Shadow rules: evaluated and recorded beside the enforced answer,
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
    from checkpoint.server.answers import shadow_answer as _shadow_answer

    policies = load_policy_dir(shadowed)
    version = policies.agents["recon"].version
    request = tool_call("recon", version, "list_templates", {})
    assert _shadow_answer(policies, request, "", frozenset(), None, None, "rev") == ("ALLOW", "allowed", "allow")
    # the run is pinned to a revision that refused this call: the shadow answer does not widen it
    pinned = pb.CheckResponse(verdict=pb.VERDICT_DENY, code="tool_not_allowed", rule="allowlist")
    assert _shadow_answer(policies, request, "", frozenset(), None, pinned, "rev") == (
        "DENY", "tool_not_allowed", "allowlist")


# -- shadow agents: a candidate definition decided beside the live one --------------------------

SHADOW_RECON = """
kind: Agent
name: recon
tenant: acme
mode: shadow
persona: a narrower recon on trial
allowlist: [create_task_from_template, list_templates, cancel_task]
scope:
  access: [read, write, destructive]
  images: ["recon/nmap:*", "recon/httpx:*"]
  nodes: ["lab-node-*"]
  subjects: ["*.lab.example.com"]
"""


@pytest.fixture
def shadow_agent(policy_dir: Path) -> Path:
    (policy_dir / "agents" / "recon-candidate.yaml").write_text(SHADOW_RECON)
    return policy_dir


def test_a_shadow_agent_is_decided_beside_the_live_one_and_never_enforced(start, shadow_agent, capsys):
    running = start()
    stub = running.stub()
    version = running.version("recon")
    # the candidate drops get_task: the call runs, the record says the candidate would refuse it
    got = stub.Check(running.with_run(tool_call("recon", version, "get_task", {"task_id": "task-1"})), timeout=5)
    assert got.verdict == pb.VERDICT_ALLOW and got.HasField("grant")
    # the candidate adds cancel_task: the live agent's answer stands, the shadow's is only recorded
    wider = stub.Check(running.with_run(tool_call("recon", version, "cancel_task", {"task_id": "task-1"})), timeout=5)
    assert (wider.verdict, wider.code) == (pb.VERDICT_DENY, "tool_not_allowed") and not wider.HasField("grant")
    first, second = _records(running)
    assert (first["verdict"], first["shadow_verdict"], first["shadow_code"]) == ("ALLOW", "DENY", "tool_not_allowed")
    assert (second["verdict"], second["shadow_verdict"], second["shadow_code"]) == ("DENY", "ALLOW", "allowed")
    assert first["agent_version"] == version  # the record names the pinned version, not the candidate's
    capsys.readouterr()
    assert main(["audit", "query", "--data", str(running.data), "--shadow-flips", "--format", "jsonl"]) == 0
    assert sorted(json.loads(line)["tool"] for line in capsys.readouterr().out.splitlines()) == ["cancel_task",
                                                                                               "get_task"]


def test_a_shadow_agent_is_no_version_no_proposal_and_no_pin(shadow_agent, policy_dir):
    from checkpoint.engine import decide
    from checkpoint.engine.resolve import resolve_agent

    policies = load_policy_dir(shadow_agent)
    (shadow_agent / "agents" / "recon-candidate.yaml").unlink()
    without = load_policy_dir(shadow_agent)
    live = policies.agents["recon"]
    assert live == without.agents["recon"]  # the live version is the files' enforce document, unchanged
    assert policies.has_shadow and not without.has_shadow
    candidate = policies.shadow_agents["recon"]
    assert "cancel_task" in candidate.tools and "cancel_task" not in live.tools
    # the catalog never heard of it: no version to pin, nothing pending for a reviewer
    assert candidate.version not in policies.catalog.versions("recon")
    assert resolve_agent(policies, "recon", "").agent_version == live.version
    from checkpoint.engine.outcome import InvalidRequest

    with pytest.raises(InvalidRequest) as caught:
        resolve_agent(policies, "recon", candidate.version, to_pin=True)
    assert caught.value.code == "unknown_agent_version"
    # the enforced answer reads the live agent; only the shadow view reads the candidate
    request = tool_call("recon", live.version, "cancel_task", {"task_id": "task-1"})
    assert decide(policies, request).verdict == pb.VERDICT_DENY
    assert decide(policies.shadow(), request).verdict == pb.VERDICT_ALLOW


def test_a_retired_pin_halts_in_the_shadow_too(shadow_agent):
    policies = load_policy_dir(shadow_agent)
    live = policies.agents["recon"]
    from dataclasses import replace

    retired = replace(policies, retired=frozenset({("recon", live.version)}))
    assert retired.shadow().agent_version("recon", live.version) == live  # never the candidate for a retired pin


@pytest.mark.parametrize(("text", "message"), [
    (SHADOW_RECON.replace("name: recon", "name: nobody"), "no live agent of that name"),
    (SHADOW_RECON.replace("tenant: acme", "tenant: default"), "the live agent's is 'acme'"),
    (SHADOW_RECON.replace("cancel_task", "no_such_tool"), "unknown tool 'no_such_tool'"),
    (SHADOW_RECON + "---\n" + SHADOW_RECON, "defined twice"),
    (SHADOW_RECON.replace("mode: shadow", "mode: Shadow"), "mode"),
])
def test_a_bad_shadow_agent_is_a_load_error_with_file_and_line(policy_dir, text, message):
    from checkpoint.policy.errors import PolicyLoadError

    (policy_dir / "agents" / "recon-candidate.yaml").write_text(text)
    with pytest.raises(PolicyLoadError) as caught:
        load_policy_dir(policy_dir)
    assert message in str(caught.value) and "recon-candidate.yaml:" in str(caught.value)


def test_a_proposal_cannot_be_a_shadow(shadow_agent):
    from checkpoint.policy.errors import PolicyLoadError
    from checkpoint.policy.loader import load_agent_definition

    policies = load_policy_dir(shadow_agent)
    with pytest.raises(PolicyLoadError, match="mode: shadow"):
        load_agent_definition(SHADOW_RECON, "proposal.yaml", policies)
