"""The learning store on its own (checkpoint/policy/learnings.py): proposals and their key, the
lifecycle's moves, triggers and going stale, with the clock in the test's hands."""

from __future__ import annotations

import pytest

from checkpoint.policy.learning_index import MatchError, build_index, compile_match
from checkpoint.policy.learnings import KEEP_PROVENANCE, LearningError, LearningStore, Proposal

DAY = 86400.0


def store() -> tuple[LearningStore, list[float]]:
    now = [1_900_000_000.0]
    return LearningStore(None, clock=lambda: now[0]), now


def breaker(run: str = "run-1", version: str = "v1", code: str = "breaker_tool_calls") -> Proposal:
    return Proposal(tenant="acme", agent="recon", agent_version=version, source="breaker", code=code,
                    text="tripped", by="checkpoint", run_id=run, decision_id=f"d-{run}", tool="list_templates")


def test_the_same_occurrence_counts_on_its_open_learning_and_keeps_its_provenance_bounded():
    s, _ = store()
    first, row = s.propose(breaker("run-0"))
    assert first.act == "propose" and row["occurrences"] == 1
    for i in range(1, 15):
        change, row = s.propose(breaker(f"run-{i}"))
        assert change.act == "occurrence" and change.learning == first.learning
    assert row["occurrences"] == 15 and len(row["provenance"]) == KEEP_PROVENANCE
    assert row["provenance"][0]["run_id"] == "run-0" and row["provenance"][-1]["run_id"] == "run-14"
    # another version, another breaker, another source: each its own proposal
    assert s.propose(breaker(version="v2"))[0].act == "propose"
    assert s.propose(breaker(code="breaker_failures"))[0].act == "propose"
    assert len(s.rows()) == 3


def test_after_a_rejection_the_next_occurrence_is_a_new_proposal():
    s, _ = store()
    change, _ = s.propose(breaker())
    s.act(change.learning, "reject", by="carol")
    again, row = s.propose(breaker("run-2"))
    assert again.act == "propose" and again.learning != change.learning and row["status"] == "proposed"


def test_a_proposal_holds_warning_at_most():
    s, _ = store()
    _, row = s.propose(Proposal(tenant="acme", agent="recon", agent_version="v1", source="agent", code="",
                                text="a lesson", by="agent:recon@v1", severity="error"))
    assert (row["severity"], row["severity_capped"]) == ("warning", 1)
    with pytest.raises(LearningError):
        s.propose(Proposal(tenant="acme", agent="recon", agent_version="v1", source="breaker", code="x", text=" ",
                           by="checkpoint"))


def test_moves_the_lifecycle_allows_and_refuses():
    s, _ = store()
    learning = s.propose(breaker())[0].learning
    with pytest.raises(LearningError) as refused:
        s.act(learning, "retire", by="carol")
    assert refused.value.code == "learning_not_active"
    with pytest.raises(LearningError) as refused:
        s.act(learning, "promote", by="carol", severity="warning")  # no match
    assert refused.value.code == "invalid_request"
    change, row = s.act(learning, "promote", by="carol", severity="warning", match="true")
    assert row["status"] == "active" and change.details["was"] == "proposed"
    with pytest.raises(LearningError) as refused:
        s.act(learning, "promote", by="carol", severity="warning", match="true")
    assert refused.value.code == "not_pending"
    change, row = s.act(learning, "review", by="dave", severity="error")
    assert row["severity"] == "error" and row["match"] == "true" and change.details["before"] == {"severity": "warning"}
    assert s.act(learning, "retire", by="carol")[1]["status"] == "retired"
    with pytest.raises(LearningError) as refused:
        s.act("lrn-none", "retire", by="carol")
    assert refused.value.code == "unknown_learning"


def test_an_act_whose_record_fails_is_not_done():
    s, _ = store()
    learning = s.propose(breaker())[0].learning

    def refuse(_change):
        raise RuntimeError("the log is gone")

    with pytest.raises(RuntimeError):
        s.act(learning, "promote", by="carol", severity="error", match="true", record=refuse)
    assert s.get(learning)["status"] == "proposed"


def test_untriggered_for_90_days_it_goes_stale_and_a_trigger_or_a_review_keeps_it():
    s, now = store()
    learning = s.propose(breaker())[0].learning
    s.act(learning, "promote", by="carol", severity="warning", match="true")
    now[0] += 60 * DAY
    s.triggered([learning])
    now[0] += 89 * DAY
    assert s.sweep() == [] and [r["id"] for r in s.acting()] == [learning]
    now[0] += 2 * DAY
    assert s.acting() == []  # no longer acts, even before a sweep marks it
    [gone] = s.sweep()
    assert gone.act == "stale" and s.get(learning)["status"] == "stale"
    s.act(learning, "review", by="carol")
    assert [r["id"] for r in s.acting()] == [learning] and s.get(learning)["triggers"] == 1


def test_a_match_is_type_checked_with_its_position():
    assert compile_match('tool.name == "get_task" && has(args.task_id)')
    for source, needle in (("tool.name ==", "match:1:"), ("tenant + 1", "match:1:8"), ("1", "must return a bool"),
                           ("", "needs a match")):
        with pytest.raises(MatchError) as bad:
            compile_match(source)
        assert needle in str(bad.value)


def test_the_index_holds_only_what_compiles_and_groups_by_tenant():
    rows = [{"id": "lrn-a", "tenant": "acme", "agent": "recon", "severity": "error", "text": "t", "reviewed_by": "c",
             "match": "true"},
            {"id": "lrn-b", "tenant": "acme", "agent": "", "severity": "warning", "text": "t", "reviewed_by": "c",
             "match": "true &&"},
            {"id": "lrn-c", "tenant": "other", "agent": "", "severity": "warning", "text": "t", "reviewed_by": "c",
             "match": "false"}]
    index = build_index(rows, "native")
    assert len(index) == 2 and index.problems and "lrn-b" in index.problems[0]
    assert [a.id for a in index.for_call("acme", "recon")] == ["lrn-a"]
    assert index.for_call("acme", "triage") == () and index.for_call("nowhere", "recon") == ()
