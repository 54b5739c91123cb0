"""Skills and templates through the real loop (docs/skills.md): the model loads a skill by name and
reads it as data; a run keeps the skill versions it pinned; a template call runs the reviewed spec
the checkpoint resolved; an agent proposes a template from a call that worked, and it waits."""

from __future__ import annotations

import json

import driver_fake_anthropic as fa
import pytest
import yaml
from driver_harness import CHECKPOINT_TOKEN, PLAN, call, decisions, final

from driver.clients import CheckpointClient, ToolRunnerClient
from driver.goal import parse_goal
from driver.loop import Driver
from driver.pricing import Prices
from driver.providers import make_provider
from driver.runs.sqlite import SqliteRunStore

SCAN = call("create_task_from_template", template="web-basic", target="web.lab.example.com")


def results(d, run_id: str, tool: str) -> list[dict]:
    return [c["result"] for c in d.store.calls(run_id) if c["tool"] == tool]


def no_review(stack, checkpoint_server) -> None:
    """acme applies file edits at once (the shipped acme reviews them: tests/security covers that)."""
    path = stack.policy_dir / "tenants" / "acme.yaml"
    tenant = yaml.safe_load(path.read_text())
    tenant["review_changes"] = False
    path.write_text(yaml.safe_dump(tenant))
    assert checkpoint_server.store.reload()


def test_the_model_loads_a_skill_by_name_and_reads_it_as_data(stack, checkpoint_server):
    d = stack.driver()
    run = stack.start(d, [call("load_skill", name="web-scan"), PLAN, SCAN,
                          final(scan_ran="receipt", reported="decision")])
    assert run.status == "succeeded", (run.code, run.reason)
    assert [s["name"] for s in run.skills] == ["web-scan"]
    [loaded] = results(d, run.run_id, "load_skill")
    assert not loaded["is_error"]
    assert loaded["content"].startswith('<data source="skill" name="web-scan" version="')
    assert "Call list_templates and pick the template" in loaded["content"]
    assert ("load_skill", "ALLOW", "allowed") in decisions(d, run.run_id)
    [record] = [r for r in checkpoint_server.log.read(run_id=run.run_id) if r["action"] == "load_skill"]
    assert record["arguments"]["version"] == run.skills[0]["version"] and record["verdict"] == "ALLOW"
    # loading before the plan is fine: reading a playbook is how a plan gets written


def test_an_unknown_or_unlisted_skill_comes_back_as_a_refusal(stack, checkpoint_server):
    (stack.policy_dir / "skills" / "refund-howto.yaml").write_text(
        "kind: Skill\nname: refund-howto\ntenant: acme\ndescription: refunds\ntext: Read the invoice.\n")
    assert checkpoint_server.store.reload()
    d = stack.driver()
    run = stack.start(d, [call("load_skill", name="nope"), call("load_skill", name="refund-howto"), PLAN, SCAN,
                          final(scan_ran="receipt", reported="x")])
    assert run.status == "succeeded", (run.code, run.reason)  # a refusal is data; the run goes on
    unknown, unlisted = results(d, run.run_id, "load_skill")
    assert unknown["is_error"] and 'code="unknown_skill"' in unknown["content"]
    assert unlisted["is_error"] and 'code="skill_not_listed"' in unlisted["content"]
    assert "Read the invoice" not in json.dumps(d.store.transcript(run.run_id))
    # triage lists no skill: it is not offered load_skill, so a call to it is outside its contract
    triage = stack.start(d, [call("load_skill", name="web-scan")], agent="triage")
    assert triage.skills == []
    assert not [c for c in d.store.calls(triage.run_id) if c["tool"] == "load_skill" and not c["code"]]
    assert "load_skill" not in [e.data["action"] for e in d.store.events(triage.run_id) if e.kind == "decision"]


def test_a_running_run_keeps_the_skill_version_it_pinned(stack, checkpoint_server):
    no_review(stack, checkpoint_server)
    d = stack.driver()
    script = [call("load_skill", name="web-scan"), PLAN, SCAN, final(scan_ran="receipt", reported="x")]
    pinned = d.start_run("recon", _goal(), owner="alice", provider="scripted",
                         provider_options={"script": script}, spawn=False)
    path = stack.policy_dir / "skills" / "web-scan.yaml"
    path.write_text(path.read_text().replace("1. Call list_templates", "1. Edited: call list_templates"))
    assert checkpoint_server.store.reload()
    old = d.run_until_stopped(pinned.run_id)
    [before] = results(d, old.run_id, "load_skill")
    assert "1. Call list_templates" in before["content"] and "Edited" not in before["content"]
    new = stack.start(d, script)
    [after] = results(d, new.run_id, "load_skill")
    assert "1. Edited: call list_templates" in after["content"]
    assert new.skills[0]["version"] != old.skills[0]["version"]


def test_a_template_call_runs_the_reviewed_spec_with_the_target_in_place(stack):
    d = stack.driver()
    run = stack.start(d, [PLAN, call("list_templates"), SCAN, final(scan_ran="receipt", reported="x")])
    assert run.status == "succeeded", (run.code, run.reason)
    listed = json.loads(d.store.receipts(run.run_id)[0]["output"])
    assert [t["name"] for t in listed] == ["intrusive-bruteforce", "web", "web-basic"]
    scan = next(r for r in d.store.receipts(run.run_id) if r["tool"] == "create_task_from_template")
    task = json.loads(scan["output"])
    assert task["spec"]["command"] == ["nmap", "-sV", "-p", "80,443", "web.lab.example.com"]
    assert task["spec"]["image"] == "recon/nmap:7.94" and task["target"] == "web.lab.example.com"
    # the model's own arguments stay what it proposed; the grant's are the filled ones
    [made] = [c for c in d.store.calls(run.run_id) if c["tool"] == "create_task_from_template"]
    assert "spec" not in made["arguments"] and json.loads(made["granted_arguments"])["spec"] == task["spec"]


def test_an_off_limits_target_in_a_template_is_refused_before_anything_runs(stack):
    d = stack.driver()
    bad = call("create_task_from_template", template="web-basic", target="payments.lab.example.com")
    run = stack.start(d, [PLAN, bad, final(scan_ran="none", reported="x")])
    [refused] = results(d, run.run_id, "create_task_from_template")
    assert refused["is_error"] and 'code="subject_off_limits"' in refused["content"]
    assert not d.store.receipts(run.run_id)


def test_an_agent_proposes_a_template_from_a_call_that_worked_and_it_waits(stack, checkpoint_server):
    d = stack.driver()
    run = d.start_run("recon", _goal(), owner="alice", provider="scripted",
                      provider_options={"script": [PLAN, SCAN]}, spawn=False)
    assert d.run_until_stopped(run.run_id).code == "handoff"  # its script ran out after the scan
    scan = next(r for r in d.store.receipts(run.run_id) if r["tool"] == "create_task_from_template")
    # another run cannot save this run's call: the driver vouches for its own receipts only
    other = stack.start(d, [call("propose_template", name="web-again", description="again",
                                 decision=scan["decision_id"])])
    [refused] = results(d, other.run_id, "propose_template")
    assert refused["is_error"] and "call_not_succeeded" in refused["content"]
    # the model's next turn (after a person resumes it) proposes its own call that worked
    propose = call("propose_template", name="web-again", description="the scan that worked",
                   decision=scan["decision_id"], reason="it found the web servers")
    d.store.update_run(run.run_id, provider_options={"script": [
        PLAN, SCAN, {"action": "handoff", "reason": "out of script"}, propose,
        final(scan_ran="receipt", reported="x")]})
    d.resume(run.run_id, "alice", spawn=False)
    assert d.run_until_stopped(run.run_id).status == "succeeded"
    [proposed] = results(d, run.run_id, "propose_template")
    assert not proposed["is_error"] and "waits for a tenant admin" in proposed["content"], proposed
    assert ("template_proposal", "ALLOW", "proposed") in decisions(d, run.run_id)
    entries = checkpoint_server.store.current.catalog.entries
    [pending] = entries.history("template", "acme", "web-again")
    assert pending["status"] == "pending" and pending["proposed_by"].startswith("agent:recon@")
    assert pending["snapshot"]["spec"]["command"] == ["nmap", "-sV", "-p", "80,443", "TARGET"]
    assert entries.live("template", "acme", "web-again") is None  # not served until an admin approves


# -- what the model is shown --------------------------------------------------------------------------


@pytest.fixture()
def fake():
    with fa.FakeMessagesAPI() as f:
        yield f


def test_the_prompt_names_skills_and_descriptions_and_never_their_text(stack, fake):
    d = Driver(SqliteRunStore(stack.tmp / "anthropic.db"), CheckpointClient(stack.checkpoint_address, token=CHECKPOINT_TOKEN),
               ToolRunnerClient(stack.toolrunner_address),
               lambda name, model, opts: make_provider("anthropic", model=model, api_key="sk-test",
                                                       base_url=fake.base_url),
               prices=Prices.from_policy_dir(stack.policy_dir), provider_backoff_seconds=0)
    fake.replies += [fa.tool_use("load_skill", {"name": "web-scan"}, call_id="toolu_s"),
                     fa.end_turn(json.dumps({"action": "handoff", "reason": "enough"}))]
    run = d.start_run("recon", _goal(), owner="alice", provider="anthropic", model="claude-haiku-4-5", spawn=False)
    d.run_until_stopped(run.run_id)
    first = fake.requests[0]
    system = first["system"] if isinstance(first["system"], str) else " ".join(b["text"] for b in first["system"])
    assert "web-scan: scan one lab web host from a reviewed template" in system
    assert "Call list_templates and pick" not in json.dumps(first)  # the text only comes when loaded
    [tool] = [t for t in first["tools"] if t["name"] == "load_skill"]
    assert tool["input_schema"]["properties"]["name"]["enum"] == ["web-scan"]
    shown = {t["name"]: t["input_schema"] for t in first["tools"]}
    assert "spec" not in shown["create_task_from_template"]["properties"]
    result = fake.requests[1]["messages"][-1]["content"][0]
    assert result["tool_use_id"] == "toolu_s" and result["content"].startswith('<data source="skill"')
    d.store.close()


def _goal():
    return parse_goal({"objective": "Scan web.lab.example.com with a template.", "criteria": [
        {"id": "scan_ran", "description": "a scan task was created",
         "check": {"kind": "receipt_ok", "tool": "create_task_from_template"}},
        {"id": "reported", "description": "reported"}]})
