"""Learnings against a real checkpoint (docs/learnings.md): advice, never authority.

The rules under test, from the seed: "Every failed task, failed run and tripped breaker becomes
a proposed learning. An agent may also propose one, with provenance recorded and severity capped
at warning. Only a person can promote a learning to active, and only active learnings act: a
warning surfaces in the response to a matching submission, an error blocks it. ... Learnings
nobody has triggered for 90 days go stale and need re-review."
"""

from __future__ import annotations

import pytest

from security.test_catalog_lifecycle import PEOPLE, as_
from security.test_catalog_lifecycle import running as running  # noqa: F401  (the fixture)
from warden.checkpoint.v1 import checkpoint_pb2 as pb

DAY = 86400.0
SCAN = {"template": "web-basic", "target": "web.lab.example.com"}


def call(running, started: pb.StartRunResponse, tool: str, args: dict, **counters) -> pb.CheckResponse:
    request = pb.CheckRequest(run=pb.RunContext(run_token=started.run_token), tool_call=pb.ToolCall(tool=tool),
                              counters=pb.Counters(**counters))
    request.tool_call.arguments.update(args)
    return running.stub().Check(request, timeout=5)


def trip(running) -> pb.CheckResponse:
    """A run of recon whose turn made too many tool calls: HALT breaker_tool_calls."""
    halted = call(running, running.start_run("recon"), "list_templates", {}, turn_tool_calls=4)
    assert (halted.verdict, halted.code) == (pb.VERDICT_HALT, "breaker_tool_calls")
    return halted


def learnings(running, person: str = "erin", **filters) -> list[pb.LearningInfo]:
    return list(as_(running, person).ListLearnings(pb.ListLearningsRequest(**filters), timeout=5).learnings)


def act(running, person: str, learning: str, act: int, **fields) -> pb.LearningActResponse:
    return as_(running, person).ReviewLearning(pb.ReviewLearningRequest(id=learning, act=act, **fields), timeout=10)


def promote(running, learning: str, severity: str = "warning", match: str = 'tool.name == "list_templates"',
            person: str = "carol") -> pb.LearningActResponse:
    return act(running, person, learning, pb.LEARNING_ACT_PROMOTE, severity=severity, match=match,
               note="seen it myself")


def learning_records(running) -> list[dict]:
    return [r for r in running.records() if r["action"] == "learning"]


def proposed_by_breaker(running) -> pb.LearningInfo:
    halted = trip(running)
    [learning] = learnings(running)
    assert learning.provenance[0].decision_id == halted.decision_id
    return learning


def clock(running, start: float = 1_900_000_000.0) -> list[float]:
    """The learning store's clock, moved by the test: now[0]."""
    now = [start]
    running.server.service.learnings.store.clock = lambda: now[0]
    return now


# -- proposals ----------------------------------------------------------------------------------


def test_a_breaker_trip_proposes_a_learning_with_its_provenance_and_counts_repeats(running):
    halted = trip(running)
    [learning] = learnings(running)
    version = running.version("recon")
    assert (learning.status, learning.source, learning.code, learning.severity) == (
        "proposed", "breaker", "breaker_tool_calls", "warning")
    assert (learning.agent, learning.agent_version, learning.tool, learning.tenant) == (
        "recon", version, "list_templates", "acme")
    seen = learning.provenance[0]
    [halt] = [r for r in running.records() if r["decision_id"] == halted.decision_id]
    assert (seen.decision_id, seen.run_id, seen.code) == (halted.decision_id, halt["run_id"], "breaker_tool_calls")
    assert seen.time and learning.proposed_by == "checkpoint"
    assert learning.suggested_match == 'tool.name == "list_templates"' and learning.match == ""
    # the same breaker on the same agent version counts there instead of proposing again
    again = trip(running)
    [learning] = learnings(running)
    assert learning.occurrences == 2 and learning.provenance[-1].decision_id == again.decision_id
    # on the record, after the HALT it came from
    proposed, counted = learning_records(running)
    assert (proposed["code"], proposed["caller"], proposed["arguments"]["act"]) == (
        "learning_proposed", "checkpoint", "propose")
    assert proposed["arguments"]["decision"] == halted.decision_id and counted["arguments"]["act"] == "occurrence"
    # a proposal acts on nothing: the same call in a fresh run is allowed, with no warning
    allowed = call(running, running.start_run("recon"), "list_templates", {})
    assert allowed.verdict == pb.VERDICT_ALLOW and not allowed.learnings


def test_an_agents_proposal_is_capped_at_warning_and_names_the_agent(running):
    started = running.start_run("recon")
    request = pb.ProposeLearningRequest(run=pb.RunContext(run_token=started.run_token),
                                        source=pb.LEARNING_SOURCE_AGENT, severity="error", tool="list_templates",
                                        text="list_templates is empty on Mondays; do not rely on it")
    response = running.stub().ProposeLearning(request, timeout=10)
    assert response.decision.code == "learning_proposed", response.decision
    learning = response.learning
    assert (learning.severity, learning.severity_capped, learning.status) == ("warning", True, "proposed")
    assert learning.proposed_by == f"agent:recon@{running.version('recon')}"
    assert learning.provenance[0].run_id == started.run_id
    record = learning_records(running)[-1]
    assert record["run_id"] == started.run_id and record["accountable_person"] == "alice"
    assert record["arguments"]["severity"] == "warning" and record["arguments"]["severity_capped"] is True
    # a breaker's learning is the checkpoint's own, and another caller cannot use the run's token
    request.source = pb.LEARNING_SOURCE_BREAKER
    assert running.stub().ProposeLearning(request, timeout=10).decision.code == "invalid_request"
    request.source = pb.LEARNING_SOURCE_AGENT
    assert as_(running, "erin").ProposeLearning(request, timeout=10).decision.code == "run_token_invalid"


def test_the_driver_reports_a_failed_run_and_a_failed_task(running):
    started = running.start_run("recon")
    run = pb.RunContext(run_token=started.run_token)
    for source, code, tool in ((pb.LEARNING_SOURCE_RUN_FAILED, "plan_refused", ""),
                               (pb.LEARNING_SOURCE_TASK_FAILED, "exit_2", "create_task_from_template")):
        response = running.stub().ProposeLearning(pb.ProposeLearningRequest(
            run=run, source=source, code=code, tool=tool, text=f"failed: {code}"), timeout=10)
        assert response.decision.code == "learning_proposed", response.decision
        assert response.learning.proposed_by == "driver" and response.learning.code == code
    assert sorted(x.source for x in learnings(running)) == ["run_failed", "task_failed"]


def test_provenance_names_only_a_decision_of_the_proposing_run(running):
    """Found in review: a caller could cite any decision, another run's or tenant's."""
    other = running.start_run("recon")
    started = running.start_run("recon")
    refused = running.stub().ProposeLearning(pb.ProposeLearningRequest(
        run=pb.RunContext(run_token=started.run_token), source=pb.LEARNING_SOURCE_TASK_FAILED, code="exit_2",
        tool="get_task", text="failed", decision_id=other.decision.decision_id), timeout=10)
    assert refused.decision.code == "invalid_request" and "is not a decision of run" in refused.decision.reason
    own = running.stub().ProposeLearning(pb.ProposeLearningRequest(
        run=pb.RunContext(run_token=started.run_token), source=pb.LEARNING_SOURCE_TASK_FAILED, code="exit_2",
        tool="get_task", text="failed", decision_id=started.decision.decision_id), timeout=10)
    assert own.decision.code == "learning_proposed"
    assert own.learning.provenance[0].decision_id == started.decision.decision_id


# -- who may act --------------------------------------------------------------------------------


def test_a_person_without_the_admin_role_cannot_promote(running):
    learning = proposed_by_breaker(running)
    for person in ("erin", "frank"):  # an operator; a person with no role at all
        refused = promote(running, learning.id, person=person)
        assert (refused.decision.verdict, refused.decision.code) == (pb.VERDICT_DENY, "role_required")
    driver = running.stub().ReviewLearning(pb.ReviewLearningRequest(
        id=learning.id, act=pb.LEARNING_ACT_PROMOTE, severity="warning", match="true"), timeout=5)
    assert driver.decision.code == "caller_not_permitted"  # a process never reviews
    assert learnings(running)[0].status == "proposed"
    assert learnings(running, "frank") == []  # no role in acme: not even a read
    refusals = [(r["caller"], r["verdict"], r["code"]) for r in learning_records(running)[1:]]
    assert refusals == [("erin", "DENY", "role_required"), ("frank", "DENY", "role_required"),
                        ("driver", "DENY", "caller_not_permitted")]


def test_a_match_that_does_not_type_check_is_refused_with_its_position(running):
    learning = proposed_by_breaker(running)
    for match, needle in (('tool.name == "x" &&', "match:1:"), ("tenant + 1", "match:1:8"),
                          ("nope == 1", "unknown variable 'nope'"), ('tool.nme == "x"', "did you mean 'name'"),
                          ("args.dry_run", "compare it, e.g. `== true`")):
        refused = promote(running, learning.id, match=match)
        assert refused.decision.code == "invalid_request" and needle in refused.decision.reason, refused.decision
    refused = promote(running, learning.id, match='"a string"')
    assert "it must return a bool" in refused.decision.reason
    assert promote(running, learning.id, severity="fatal").decision.code == "invalid_request"


# -- only active learnings act ------------------------------------------------------------------


def test_a_promoted_warning_is_in_the_next_matching_answer_and_the_call_still_runs(running):
    learning = proposed_by_breaker(running)
    promoted = promote(running, learning.id, match='tool.name == "create_task_from_template" && '
                                                   'args.target.endsWith(".lab.example.com")')
    assert promoted.decision.code == "learning_changed" and promoted.learning.status == "active"
    started = running.start_run("recon")
    answer = call(running, started, "create_task_from_template", SCAN)
    assert (answer.verdict, answer.code) == (pb.VERDICT_ALLOW, "allowed") and answer.HasField("grant")
    [note] = answer.learnings
    assert (note.id, note.severity, note.reviewed_by) == (learning.id, "warning", "carol")
    assert note.text == learning.text
    assert running.records()[-1]["reason"].endswith(f"warned by learning {learning.id}")
    # a call it does not match carries nothing
    assert not call(running, started, "list_templates", {}).learnings
    # it acts on its agent only: triage's calls never see recon's lessons
    assert not call(running, running.start_run("triage"), "list_templates", {}).learnings
    assert learnings(running, id=learning.id)[0].triggers == 1


def test_an_error_learning_blocks_the_call_with_learning_blocked(running):
    learning = proposed_by_breaker(running)
    promote(running, learning.id, match='tool.name == "create_task_from_template"')
    edited = act(running, "dave", learning.id, pb.LEARNING_ACT_REVIEW, severity="error", text="Scans hang: stop.")
    assert edited.decision.code == "learning_changed" and edited.learning.severity == "error"
    answer = call(running, running.start_run("recon"), "create_task_from_template", SCAN)
    assert (answer.verdict, answer.code, answer.rule) == (pb.VERDICT_DENY, "learning_blocked", f"learning:{learning.id}")
    assert not answer.HasField("grant") and "reviewed by dave" in answer.reason and "Scans hang" in answer.reason
    assert [n.severity for n in answer.learnings] == ["error"]
    # what the policy refuses stays refused, with the policy's own code: a learning adds nothing
    refused = call(running, running.start_run("recon"), "create_task_from_template",
                   {"template": "web-basic", "target": "payments.lab.example.com"})
    assert refused.code == "subject_off_limits"
    # retired, it acts no more
    act(running, "carol", learning.id, pb.LEARNING_ACT_RETIRE, note="fixed upstream")
    assert call(running, running.start_run("recon"), "create_task_from_template", SCAN).verdict == pb.VERDICT_ALLOW


def test_a_rejected_proposal_never_acts_and_rejection_is_final(running):
    learning = proposed_by_breaker(running)
    assert act(running, "carol", learning.id, pb.LEARNING_ACT_REJECT).decision.code == "learning_changed"
    assert promote(running, learning.id).decision.code == "not_pending"
    assert act(running, "carol", learning.id, pb.LEARNING_ACT_RETIRE).decision.code == "learning_not_active"
    assert act(running, "carol", "lrn-nothere", pb.LEARNING_ACT_RETIRE).decision.code == "unknown_learning"
    assert not call(running, running.start_run("recon"), "list_templates", {}).learnings


# -- stale --------------------------------------------------------------------------------------


def test_a_learning_nobody_triggered_for_90_days_stops_acting_until_reviewed_again(running):
    now = clock(running)
    learning = proposed_by_breaker(running)
    promote(running, learning.id)
    sweep = running.server.service.learnings.sweep
    now[0] += 80 * DAY
    assert sweep() == []
    assert call(running, running.start_run("recon"), "list_templates", {}).learnings  # triggered: day 80
    now[0] += 89 * DAY
    assert sweep() == []  # 89 days after its last trigger
    now[0] += 2 * DAY
    [gone] = sweep()
    assert gone.learning == learning.id
    assert not call(running, running.start_run("recon"), "list_templates", {}).learnings
    [stale] = learnings(running, status="stale")
    assert stale.id == learning.id and stale.stale_at
    record = learning_records(running)[-1]
    assert (record["caller"], record["arguments"]["act"], record["code"]) == ("learnings-sweep", "stale",
                                                                              "learning_changed")
    # an admin reviews it again: it acts, and its 90 days start over
    reviewed = act(running, "carol", learning.id, pb.LEARNING_ACT_REVIEW, note="still true")
    assert reviewed.learning.status == "active"
    assert call(running, running.start_run("recon"), "list_templates", {}).learnings


# -- the record ---------------------------------------------------------------------------------


def test_every_act_is_recorded_with_the_person_before_it_takes_effect(running):
    learning = proposed_by_breaker(running)
    promote(running, learning.id)
    act(running, "dave", learning.id, pb.LEARNING_ACT_REVIEW, match='tool.name == "get_task"')
    act(running, "carol", learning.id, pb.LEARNING_ACT_RETIRE, note="done")
    acts = [(r["caller"], r["principal"], r["arguments"]["act"], r["code"]) for r in learning_records(running)]
    assert acts == [("checkpoint", None, "propose", "learning_proposed"),
                    ("carol", "people", "promote", "learning_changed"),
                    ("dave", "people", "review", "learning_changed"),
                    ("carol", "people", "retire", "learning_changed")]
    promoted, reviewed = learning_records(running)[1:3]
    assert promoted["arguments"]["match"] == 'tool.name == "list_templates"' and promoted["agent"] == "recon"
    assert reviewed["arguments"]["before"] == {"match": 'tool.name == "list_templates"'}
    # an act the log cannot take is not done
    other = act(running, "carol", learning.id, pb.LEARNING_ACT_RETIRE)
    assert other.decision.code == "learning_not_active"
    fresh = proposed_by_breaker_again(running)
    running.server.log.close()
    refused = promote(running, fresh)
    assert (refused.decision.verdict, refused.decision.code) == (pb.VERDICT_DENY, "audit_unavailable")
    assert running.server.service.learnings.store.get(fresh)["status"] == "proposed"


def proposed_by_breaker_again(running) -> str:
    """A second learning: the same breaker on another agent (triage)."""
    halted = call(running, running.start_run("triage"), "list_templates", {}, turn_tool_calls=99)
    assert halted.code == "breaker_tool_calls"
    return next(x.id for x in learnings(running) if x.agent == "triage")


@pytest.mark.parametrize("person", ["erin", "carol"])
def test_any_role_in_the_tenant_reads_the_learnings(running, person):
    learning = proposed_by_breaker(running)
    [shown] = learnings(running, person, id=learning.id)
    assert shown.id == learning.id and shown.text
    assert learnings(running, person, status="active") == []
    assert PEOPLE[person]
