"""A run is bound by the policy revision it began under: later edits never widen what it may do
(tools, rules, ceilings, off-limits subjects), while narrowing edits apply to it at once.

Each test starts a run, edits the policy folder, reloads, and asks again, through a real server.
"""

from __future__ import annotations

import sqlite3

import pytest

from checkpoint.policy import AgentCatalog, load_policy_dir
from checkpoint.server.pins import PinnedPolicies
from checkpoint.server.runs import Refused
from warden.checkpoint.v1 import checkpoint_pb2 as pb

SUBNET = {"template": "web", "target": "10.20.0.0/24"}
PAYMENTS = {"template": "web", "target": "payments.lab.example.com"}
SHOP = {"template": "web", "target": "shop.lab.example.com"}


def call(token: str, args: dict, **counters: int) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token),
                          tool_call=pb.ToolCall(tool="create_task_from_template"),
                          counters=pb.Counters(**counters))
    req.tool_call.arguments.update(args)
    return req


def edit(checkpoint, path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))
    assert checkpoint.server.store.reload(), checkpoint.server.store.status.errors


def answer(checkpoint, token, args, **counters) -> tuple[int, str]:
    got = checkpoint.stub().Check(call(token, args, **counters), timeout=5)
    return got.verdict, got.code


def test_dropping_an_approval_rule_does_not_free_a_running_run(checkpoint, policy_dir):
    before = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, before, SUBNET) == (pb.VERDICT_REQUIRE_APPROVAL, "approval_required")
    rules = policy_dir / "rules" / "recon.yaml"
    edit(checkpoint, rules, "condition: 'touched.subjects.exists(s, s.range)'", "condition: 'false'")
    assert answer(checkpoint, before, SUBNET) == (pb.VERDICT_REQUIRE_APPROVAL, "approval_required")
    # the edit widens recon (its version covers the rules that apply to it): an admin of acme
    # reviews it, and a run that begins after that has it
    store = checkpoint.server.store
    pending = store.current.file_versions["recon"]
    assert store.current.agents["recon"].version != pending
    store.current.catalog.decide("recon", pending, approve=True, by="alice", note="the rule is retired")
    store.refresh()
    after = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, after, SUBNET) == (pb.VERDICT_ALLOW, "allowed")


def test_removing_an_off_limits_subject_does_not_open_it_to_a_running_run(checkpoint, policy_dir):
    before = checkpoint.start_run("recon").run_token
    off_limits = policy_dir / "subjects" / "off-limits.yaml"
    edit(checkpoint, off_limits, 'pattern: "payments.lab.example.com"', 'pattern: "payments.other.example.com"')
    got = checkpoint.stub().Check(call(before, PAYMENTS), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "subject_off_limits")
    assert "pinned" in got.reason and not got.HasField("grant")
    after = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, after, PAYMENTS) == (pb.VERDICT_ALLOW, "allowed")


def test_raising_a_ceiling_does_not_raise_it_for_a_running_run(checkpoint, policy_dir):
    before = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, before, SHOP, identical_calls=4) == (pb.VERDICT_HALT, "breaker_repetition")
    edit(checkpoint, policy_dir / "tenants" / "acme.yaml", "repetition: 3", "repetition: 5")
    assert answer(checkpoint, before, SHOP, identical_calls=4) == (pb.VERDICT_HALT, "breaker_repetition")
    after = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, after, SHOP, identical_calls=4) == (pb.VERDICT_ALLOW, "allowed")


def test_a_narrowing_edit_applies_to_a_running_run_at_once(checkpoint, policy_dir):
    before = checkpoint.start_run("recon").run_token
    assert answer(checkpoint, before, SHOP) == (pb.VERDICT_ALLOW, "allowed")
    off_limits = policy_dir / "subjects" / "off-limits.yaml"
    off_limits.write_text(off_limits.read_text() + '  - pattern: "shop.lab.example.com"\n    reason: frozen\n')
    assert checkpoint.server.store.reload()
    assert answer(checkpoint, before, SHOP) == (pb.VERDICT_DENY, "subject_off_limits")
    edit(checkpoint, policy_dir / "tenants" / "acme.yaml", "repetition: 3", "repetition: 1")
    assert answer(checkpoint, before, PAYMENTS | {"target": "web.lab.example.com"}, identical_calls=2) == (
        pb.VERDICT_HALT, "breaker_repetition")


def test_a_child_is_bound_by_the_revision_its_parent_began_under(checkpoint, policy_dir):
    parent = checkpoint.start_run("recon").run_token
    rules = policy_dir / "rules" / "recon.yaml"
    (policy_dir / "rules" / "triage.yaml").write_text(
        "kind: Rule\nname: triage-reads-only-task-1\neffect: deny_if\ncondition: 'args.task_id != \"task-1\"'\n"
        "tools: [get_task]\nagents: [triage]\nreason: triage reads task-1 only\n")
    assert checkpoint.server.store.reload()
    parent = checkpoint.start_run("recon").run_token  # begins under the rule
    (policy_dir / "rules" / "triage.yaml").unlink()  # a widening edit while the parent runs
    assert checkpoint.server.store.reload()
    delegated = checkpoint.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token=parent),
                                                        delegation=pb.Delegation(agent="triage")), timeout=5)
    assert delegated.verdict == pb.VERDICT_ALLOW
    req = pb.CheckRequest(run=pb.RunContext(run_token=delegated.child_run_token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-2"})
    got = checkpoint.stub().Check(req, timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "rule_denied")
    assert rules.exists()


def test_a_run_whose_revision_is_unknown_is_refused(checkpoint, policy_dir):
    before = checkpoint.start_run("recon").run_token
    edit(checkpoint, policy_dir / "tenants" / "acme.yaml", "repetition: 3", "repetition: 2")
    # the catalog lost the old revision (a wiped data folder, say): bound by nothing, so refused
    catalog = sqlite3.connect(checkpoint.data / "catalog.db")
    with catalog:
        catalog.execute("DELETE FROM policy_revisions WHERE revision != ?", (checkpoint.server.store.current.revision,))
    catalog.close()
    checkpoint.server.service.pins = type(checkpoint.server.service.pins)()  # nothing compiled kept either
    got = checkpoint.stub().Check(call(before, SHOP), timeout=5)
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "policy_error", "pin")


def test_a_revision_that_no_longer_compiles_is_refused_without_compiling_it_per_call(tmp_path):
    """Its files never change, so neither does the refusal: kept like a compiled set. Compiling
    the whole folder again on every call of a run pinned to it (one at a time, under that
    revision's lock) made each of those calls pay a full policy load."""
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "tool.yaml").write_text("kind: Tool\nname: ping\naccess: read\ninput_schema: {type: object}\n")
    catalog = AgentCatalog(tmp_path / "catalog.db")
    current = load_policy_dir(folder, catalog=catalog)
    # an old revision a stricter loader refuses (a rule whose code passes for `allowed`)
    catalog.record_revision("0ld", [("r.yaml", b"kind: Rule\nname: r\neffect: deny_if\ncondition: 'true'\n"
                                                b"code: allowed\n")])
    pins = PinnedPolicies()
    with pytest.raises(Refused) as first:
        pins.get(current, "0ld")
    assert (first.value.code, first.value.rule) == ("policy_error", "pin") and "no longer compiles" in first.value.reason
    db = sqlite3.connect(tmp_path / "catalog.db")
    with db:
        db.execute("DELETE FROM policy_revisions WHERE revision = '0ld'")
    db.close()
    with pytest.raises(Refused) as again:  # not read (nor compiled) again: the same refusal
        pins.get(current, "0ld")
    assert again.value.reason == first.value.reason and again.value is not first.value
