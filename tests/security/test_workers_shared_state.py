"""Two workers on one data folder (`serve --workers N`): an act answered by one binds the other.

Each worker holds its policy set in memory; a catalog act refreshes the set of the worker that
did it. These run two real checkpoints (create_server with shared=True, as the supervisor starts
them) on one data folder and check that the other worker decides under the act from its next
request on, and that two admins racing on two workers get one answer.
"""

from __future__ import annotations

import hashlib
import threading

import pytest
from server.conftest import TOKEN

from checkpoint.server import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.grants import SigningKey

from .test_catalog_lifecycle import (
    NARROW,
    PEOPLE,
    as_,
    changes,
    edit_triage,
    live,
    propose,
    reviewed_tenant,
)


@pytest.fixture
def workers(start, policy_dir, tmp_path):
    reviewed_tenant(policy_dir)
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver"}
    tokens.update({hashlib.sha256(t.encode()).digest(): name for name, t in PEOPLE.items()})
    key = SigningKey.generate()
    data = tmp_path / "shared-data"
    return [start(auth=AuthPolicy(tokens=tokens), key=key, data_dir=data, shared=True, watch_interval=None)
            for _ in range(2)]


def test_a_retirement_on_one_worker_halts_the_run_on_the_other(workers):
    a, b = workers
    old = live(a)
    started = b.start_run("triage", old)
    assert started.run_token
    edit_triage(a, *NARROW)
    assert b.server.store.reload()  # the other worker's watcher loads the same edit
    call = pb.CheckRequest(run=pb.RunContext(run_token=started.run_token), tool_call=pb.ToolCall(tool="get_task"))
    call.tool_call.arguments.update({"task_id": "task-1"})
    # a check on b before the act: b has compiled (and keeps) the run's pinned set by now
    assert b.stub().Check(call, timeout=5).verdict == pb.VERDICT_ALLOW
    retired = as_(a, "carol").RetireAgentVersion(pb.RetireAgentVersionRequest(agent="triage", version=old,
                                                                             note="leaked"), timeout=5)
    assert retired.decision.code == "catalog_changed"
    halted = b.stub().Check(call, timeout=5)
    assert (halted.verdict, halted.code) == (pb.VERDICT_HALT, "agent_version_retired")


def test_an_edit_both_workers_load_is_applied_and_recorded_once(workers):
    a, b = workers
    before = [r for r in a.records(catalog=True) if r["action"] == "catalog"]
    edit_triage(a, *NARROW)
    assert b.server.store.reload()
    assert live(a) == live(b)
    after = [r for r in a.records(catalog=True) if r["action"] == "catalog"][len(before):]
    assert [(r["code"], r["arguments"]["act"]) for r in after] == [("catalog_changed", "apply")]


def test_two_admins_on_two_workers_approve_one_proposal_once(workers):
    a, b = workers
    proposal = propose(a, "erin", changes=changes(persona="You read tasks carefully."))
    assert proposal.decision.code == "proposed"
    version = proposal.version.version
    answers: list[str] = []
    barrier = threading.Barrier(2)

    def approve(worker, person: str) -> None:
        barrier.wait()
        got = as_(worker, person).ReviewAgentChange(
            pb.ReviewAgentChangeRequest(agent="triage", version=version, approve=True, note="ok"), timeout=10)
        answers.append(got.decision.code)

    threads = [threading.Thread(target=approve, args=(w, p)) for w, p in ((a, "carol"), (b, "dave"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == ["catalog_changed", "not_pending"], answers
    approvals = [r for r in a.records(catalog=True) if r["action"] == "catalog" and r["code"] == "catalog_changed"
                 and r["arguments"].get("act") == "approve"]
    assert len(approvals) == 1
    # the worker that answered not_pending refreshes at its next decision, not at its answer
    for worker in workers:
        worker.stub().Check(pb.CheckRequest(run=pb.RunContext(run_token="none"), tool_call=pb.ToolCall(tool="x")),
                            timeout=5)
    assert live(a) == live(b) == version


def _template_call(worker, run: pb.StartRunResponse) -> pb.CheckResponse:
    request = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                              tool_call=pb.ToolCall(tool="create_task_from_template"))
    request.tool_call.arguments.update({"template": "web-basic", "target": "web.lab.example.com"})
    return worker.stub().Check(request, timeout=5)


def test_a_template_retired_on_one_worker_is_served_by_neither(workers):
    """A retired version is out of service for good: the other worker, which served the template
    before the retirement (and keeps the live versions it serves in memory), refuses it from its
    next decision on, as it does a retired agent version."""
    a, b = workers
    run = b.start_run("recon")
    assert run.run_token, run.decision
    served = _template_call(b, run)
    assert (served.verdict, served.code) == (pb.VERDICT_ALLOW, "allowed")
    version = served.arguments["spec"]["version"]
    retired = as_(a, "carol").RetireCatalogEntry(pb.RetireCatalogEntryRequest(
        kind="template", tenant="acme", name="web-basic", version=version, note="hangs the lab"), timeout=5)
    assert retired.decision.code == "catalog_changed", retired.decision
    for worker in (a, b):
        got = _template_call(worker, run)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "unknown_template"), (worker is b, got.reason)
        assert not got.HasField("grant")


def test_a_skill_retired_on_one_worker_is_not_pinned_by_the_other(workers):
    """A new run started on the other worker does not pin a skill version retired on the first."""
    a, b = workers
    first = b.start_run("recon")
    skills = b.stub().RunSkills(pb.RunSkillsRequest(run=pb.RunContext(run_token=first.run_token)), timeout=5)
    [pinned] = [s for s in skills.skills if s.name == "web-scan"]
    retired = as_(a, "carol").RetireCatalogEntry(pb.RetireCatalogEntryRequest(
        kind="skill", tenant="acme", name="web-scan", version=pinned.version, note="wrong advice"), timeout=5)
    assert retired.decision.code == "catalog_changed", retired.decision
    later = b.start_run("recon")
    assert later.run_token, later.decision
    again = b.stub().RunSkills(pb.RunSkillsRequest(run=pb.RunContext(run_token=later.run_token)), timeout=5)
    assert [s.name for s in again.skills] == []
