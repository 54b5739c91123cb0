"""Per-version statistics as a fold over the decision log (checkpoint/audit/stats.py): what each
record counts for, and that reading on from where it stopped gives what a recompute gives."""

from __future__ import annotations

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.audit.stats import AgentStats, EndInvalid, end_details


def record(run: str, version: str = "v1", agent: str = "recon", **fields):
    return {"tenant": "acme", "run_id": run, "root_run_id": run, "agent": agent, "agent_version": version,
            "action": "model_call", "verdict": "ALLOW", "code": "allowed", **fields}


def end(run: str, status: str, tokens: int = 0, version: str = "v1", **details):
    return record(run, version, action="end", code="recorded",
                  arguments={"person": "", "note": "", "details": {"status": status, "code": status,
                                                                   "tokens": tokens, "turns": 1, **details}})


def halt(run: str, breaker: str, version: str = "v1"):
    return record(run, version, verdict="HALT", code=f"breaker_{breaker}")


@pytest.fixture
def log(tmp_path):
    with DecisionLog(tmp_path / "decisions.db") as opened:
        yield opened


def figures(log, agent: str = "recon") -> dict[str, dict]:
    return {v.version: v.as_dict() for v in AgentStats(log.path).current(agent)[1]}


def test_each_run_is_counted_once_by_its_last_end(log):
    for r in (record("a", action="start_run"), record("a"), end("a", "succeeded", 100),
              record("b", action="start_run"), halt("b", "tokens"), end("b", "paused", 40),
              record("b", action="resume", code="recorded"), end("b", "failed", 90),
              record("c", action="start_run"), end("c", "paused", 10), end("c", "paused", 30),
              record("d", action="start_run"), record("e", action="start_run", agent_version="v2"),
              end("e", "cancelled", 5, version="v2")):
        log.append(r)
    v1, v2 = figures(log)["v1"], figures(log)["v2"]
    assert {k: v1[k] for k in ("runs", "succeeded", "failed", "cancelled", "paused", "pauses", "open")} == {
        "runs": 4, "succeeded": 1, "failed": 1, "cancelled": 0, "paused": 2, "pauses": 3, "open": 2}
    assert v1["breaker_trips"] == {"tokens": 1}
    # tokens as each run's last end reported them: a 100, b 90, c 30; d reported none
    assert (v1["tokens"], v1["runs_with_tokens"], v1["average_tokens"]) == (220, 3, 73.3)
    assert (v2["runs"], v2["cancelled"], v2["open"], v2["average_tokens"]) == (1, 1, 0, 5.0)


def test_a_correcting_end_replaces_the_outcome_and_takes_back_its_pause(log):
    for r in (end("a", "paused", 10), end("a", "cancelled", 10, instead_of="paused"),
              end("b", "succeeded", 20), end("b", "cancelled", 20, instead_of="succeeded")):
        log.append(r)
    v1 = figures(log)["v1"]
    assert (v1["paused"], v1["pauses"], v1["succeeded"], v1["cancelled"], v1["open"]) == (0, 0, 0, 2, 0)


def test_what_does_not_count(log):
    log.append(record("", action="none", verdict="DENY", code="run_token_invalid"))  # filed under no run
    log.append(record("x", action="catalog", code="proposed"))  # a proposal from a run of another agent
    log.append(record("a", action="end", code="role_required", verdict="DENY",  # a refused end
                      arguments={"person": "", "note": "", "details": {"status": "succeeded"}}))
    log.append(record("a", verdict="HALT", code="handoff"))  # a handoff is not a breaker
    [v1] = figures(log).values()
    assert (v1["runs"], v1["succeeded"], v1["breaker_trips"], v1["open"]) == (1, 0, {}, 1)


def test_reading_on_gives_what_a_recompute_gives_and_a_new_log_starts_over(log, tmp_path):
    stats = AgentStats(log.path)
    log.append(end("a", "paused", 10))
    first = stats.current("recon")[1][0].as_dict()
    log.append(end("a", "succeeded", 30))
    log.append(halt("b", "turns", version="v2"))
    seq, incremental = stats.current()
    assert seq == 3 and [v.as_dict() for v in incremental] == [v.as_dict() for v in stats.recompute()[1]]
    assert first["paused"] == 1 and incremental[0].succeeded == 1 and incremental[0].tokens == 30
    log.close()
    for name in ("decisions.db", "decisions.db-wal", "decisions.db-shm"):
        (tmp_path / name).unlink(missing_ok=True)
    with DecisionLog(tmp_path / "decisions.db") as fresh:  # moved aside: a new, shorter log
        fresh.append(end("z", "failed", 1))
        assert [(v.version, v.runs, v.failed) for v in stats.current()[1]] == [("v1", 1, 1)]


@pytest.mark.parametrize("details, problem", [
    ({"status": "done"}, "status"),
    ({"status": "paused", "tokens": -1}, "tokens"),
    ({"status": "paused", "tokens": 1.5}, "tokens"),
    ({"status": "paused", "turns": True}, "turns"),
    ({"status": "paused", "code": "x" * 65}, "code"),
    ({"status": "paused", "instead_of": "running"}, "instead_of"),
    ({"status": "paused", "by": "me"}, "unknown field"),
])
def test_an_end_carries_exactly_what_the_statistics_read(details, problem):
    with pytest.raises(EndInvalid, match=problem):
        end_details(details)
    assert end_details({"status": "failed", "code": "plan_refused", "tokens": 12.0, "turns": 3}) == {
        "status": "failed", "code": "plan_refused", "tokens": 12, "turns": 3}
