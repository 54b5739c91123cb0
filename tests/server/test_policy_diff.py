"""`warden policy diff`: recorded decisions (a real checkpoint's log) replayed against a candidate
folder find exactly the flips an edit causes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from checkpoint.policy import load_policy_dir
from checkpoint.replay import diff, read_records
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.cli import main

from .helpers import tool_call

NEW_RULE = """
---
kind: Rule
name: no-template-listing
description: a candidate rule for the diff tests
effect: deny_if
condition: 'true'
tools: [list_templates]
reason: listing templates is off for now
"""


@pytest.fixture
def recorded(checkpoint):
    """A log of a recon run's calls (allowed and refused) and a refunds call (masked arguments)."""
    version = checkpoint.version("recon")
    stub = checkpoint.stub()
    calls = [
        ("get_task", {"task_id": "task-1"}),
        ("get_task", {"task_id": "task-2"}),
        ("list_templates", {}),
        ("create_task_from_template", {"template": "web-basic", "target": "www.lab.example.com"}),
        ("create_task_from_template", {"template": "web-basic", "target": "example.org"}),
        ("cancel_task", {"task_id": "task-1"}),
    ]
    answers = []
    for tool, args in calls:
        request = checkpoint.with_run(tool_call("recon", version, tool, args))
        answers.append((tool, stub.Check(request, timeout=5)))
    verdicts = [(t, pb.Verdict.Name(a.verdict), a.code) for t, a in answers]
    assert verdicts[0][1:] == ("VERDICT_ALLOW", "allowed") and verdicts[4][2] == "subject_out_of_scope", verdicts
    refunds = checkpoint.version("refunds")
    request = checkpoint.with_run(tool_call("refunds", refunds, "propose_refund", {
        "invoice_id": "inv-1", "payment_id": "pay_1", "customer": "customer:bob", "amount_usd": 5,
        "card_number": "4111111111111111", "reason": "damaged"}))
    assert stub.Check(request, timeout=5).code in ("allowed", "approval_required")
    return checkpoint


def _candidate(checkpoint, tmp_path: Path, *, drop_tool: str | None = None, add_rule: bool = False) -> Path:
    target = tmp_path / "candidate"
    shutil.copytree(checkpoint.policies, target)
    if drop_tool:
        path = target / "agents" / "recon.yaml"
        text = path.read_text()
        assert f"{drop_tool}, " in text
        path.write_text(text.replace(f"{drop_tool}, ", ""))
    if add_rule:
        path = target / "rules" / "recon.yaml"
        path.write_text(path.read_text() + NEW_RULE)
    return target


def _diff_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main(["policy", "diff", "--format", "json", *argv])
    return code, json.loads(capsys.readouterr().out)


def test_removing_a_tool_flips_exactly_its_calls(recorded, tmp_path, capsys):
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task")
    code, report = _diff_json(capsys, "--against", str(recorded.data), "--no-tests", str(candidate))
    assert code == 1
    flips = [d for g in report["groups"] for d in g["decisions"]]
    assert len(flips) == 2 and report["changed"] == 2
    for flip in flips:
        assert flip["tool"] == "get_task" and flip["agent"] == "recon" and flip["rule"] == "allowlist"
        assert flip["before"]["verdict"] == "ALLOW" and flip["after"] == {
            "verdict": "DENY", "code": "tool_not_allowed", "rule": "allowlist"}
    assert [(g["rule"], g["agent"], g["count"]) for g in report["groups"]] == [("allowlist", "recon", 2)]
    # every recon call replayed; the refund's card number is masked in the log: not guessed
    assert report["replayed"] == 6
    assert report["not_replayable"] == {"the tool's arguments are masked in the log (its audit section)": 1}
    assert report["acts"].get("start_run") == 7


def test_an_unchanged_folder_changes_nothing(recorded, tmp_path, capsys):
    candidate = _candidate(recorded, tmp_path)
    code, report = _diff_json(capsys, "--against", str(recorded.data), str(candidate))
    assert code == 0 and report["changed"] == 0 and report["groups"] == []
    assert report["replayed"] == 6 and report["tests"] > 10  # the shipped tests, replayed too
    code, report = _diff_json(capsys, "--against", str(recorded.data), "--policies", str(recorded.policies),
                              str(candidate))
    assert code == 0 and report["changed"] == 0 and report["baseline"] == "current"


def test_flips_are_grouped_by_rule_and_agent(recorded, tmp_path, capsys):
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task", add_rule=True)
    code, report = _diff_json(capsys, "--against", str(recorded.data), "--policies", str(recorded.policies),
                              "--no-tests", str(candidate))
    assert code == 1
    groups = {(g["rule"], g["agent"]): sorted(d["tool"] for d in g["decisions"]) for g in report["groups"]}
    assert groups == {("allowlist", "recon"): ["get_task", "get_task"],
                      ("rule:no-template-listing", "recon"): ["list_templates"]}
    # the policy tests replay too: a test of the removed tool flips, filed under its own rule and agent
    code, report = _diff_json(capsys, "--against", str(recorded.data), str(candidate))
    tests = [d for g in report["groups"] for d in g["decisions"] if d["source"].startswith("test ")]
    assert any(d["source"] == "test recon agent / listing templates needs no arguments" for d in tests)
    capsys.readouterr()
    assert main(["policy", "diff", "--against", str(recorded.data), str(candidate)]) == 1
    text = capsys.readouterr().out
    assert "rule allowlist  agent recon" in text and "rule rule:no-template-listing  agent recon" in text
    assert "counters are not recorded" in text


def test_a_jsonl_export_replays_like_the_log(recorded, tmp_path, capsys):
    export = tmp_path / "export.jsonl"
    assert main(["audit", "export", "--data", str(recorded.data), "-o", str(export)]) == 0
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task")
    from_log = diff(list(read_records(recorded.data)), load_policy_dir(candidate))
    from_export = diff(list(read_records(export)), load_policy_dir(candidate))
    assert from_export.as_dict() == from_log.as_dict()
    code, report = _diff_json(capsys, "--against", str(export), "--no-tests", str(candidate))
    assert code == 1 and report["changed"] == 2


def test_exit_codes_for_usage_and_load_errors(recorded, tmp_path, capsys):
    candidate = _candidate(recorded, tmp_path)
    assert main(["policy", "diff", "--against", str(tmp_path / "nothing"), str(candidate)]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert main(["policy", "diff", "--against", str(bad), str(candidate)]) == 2
    assert main(["policy", "diff", "--against", str(recorded.data), "--data", str(tmp_path / "nodata"),
                 str(candidate)]) == 2  # --data holds no agent catalog
    (candidate / "agents" / "recon.yaml").write_text("kind: Agent\nname: [\n")
    assert main(["policy", "diff", "--against", str(recorded.data), str(candidate)]) == 3
    with pytest.raises(SystemExit) as exited:
        main(["policy", "diff", str(candidate)])  # --against is required
    assert exited.value.code == 2


def test_pinned_versions_the_candidate_lacks_are_reported(recorded, tmp_path, capsys):
    candidate = _candidate(recorded, tmp_path, drop_tool="get_task")
    code, report = _diff_json(capsys, "--against", str(recorded.data), "--no-tests", "--versions", "pinned",
                              str(candidate))
    # recon's edit made a new version; the recorded one is not in the candidate without its catalog
    assert code == 0 and report["replayed"] == 0
    reasons = report["not_replayable"]
    assert reasons["the pinned agent version is not in the candidate or its catalog (give --data)"] == 6
    # with the catalog of the data folder, the pinned (old) recon version decides: nothing changes
    code, report = _diff_json(capsys, "--against", str(recorded.data), "--no-tests", "--versions", "pinned",
                              "--data", str(recorded.data), str(candidate))
    assert code == 0 and report["replayed"] == 6
