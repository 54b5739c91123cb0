"""Limits across runs at a running checkpoint (a real gRPC server, its SQLite `limits.db`): counted
after an ALLOW only, per principal, tenant, agent or person, in windows of the checkpoint's clock;
refused past the max with `limit_exceeded` on the record; and a call refused after it was counted
(its approval already spent) gives its count back. Two replicas on one PostgreSQL:
test_limits_fleet.py."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime

import pytest

from checkpoint.policy import load_policy_dir
from checkpoint.server import AuthPolicy
from checkpoint.server.limit_counts import LimitCounts
from checkpoint.server.limit_store import LIMITS_FILE, SqliteLimits
from checkpoint.server.runs import Established
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .conftest import PERSON_TOKEN, TOKEN
from .test_approvals import approve, approved_call, asked
from .test_run_ends import call

BATCH_TOKEN = "batch-token-0123456789abcdef"
T = datetime(2026, 3, 2, 10, 59, 59, tzinfo=UTC)  # the last second of the 10:00 window
HOUR_START = int(datetime(2026, 3, 2, 10, tzinfo=UTC).timestamp())

GLOBEX = """kind: Tenant
name: globex
---
kind: Agent
name: scout
tenant: globex
persona: reads tasks
allowlist: [get_task]
scope: {access: [read]}
"""
BATCH = """kind: Principal
name: batch
identities: ["token:batch"]
check: {tenants: ["*"], agents: ["*"], persons: any}
"""


def limit(per: str = "principal", tools: str = "[get_task]", max_: int = 2, window: str = "1h", name: str = "reads",
          extra: str = "") -> str:
    return (f"  - {{name: {name}, counts: calls, tools: {tools}, per: {per}, window: {window}, max: {max_}"
            f"{extra}}}\n")


def with_limits(policy_dir, *limits: str) -> None:
    instance = policy_dir / "instance.yaml"
    instance.write_text(instance.read_text() + "limits:\n" + "".join(limits))
    (policy_dir / "tenants" / "globex.yaml").write_text(GLOBEX)
    (policy_dir / "principals" / "batch.yaml").write_text(BATCH)


@pytest.fixture
def limited(start, policy_dir):
    """A checkpoint whose clock the test sets, with two driver principals (driver, batch)."""
    def starting(*limits: str):
        with_limits(policy_dir, *(limits or (limit(),)))
        running = start(auth=AuthPolicy(tokens={hashlib.sha256(t.encode()).digest(): n for t, n in
                                               ((TOKEN, "driver"), (BATCH_TOKEN, "batch"), (PERSON_TOKEN, "carol"))}))
        running.server.service.clock = lambda: T
        return running
    return starting


def check(running, token: str, tool: str = "get_task", principal_token: str = TOKEN) -> pb.CheckResponse:
    request = call(token)
    request.tool_call.tool = tool
    if tool == "list_templates":
        request.tool_call.arguments.Clear()
    return running.stub(principal_token).Check(request, timeout=5)


def run_token(running, agent: str = "recon", person: str = "alice", principal_token: str = TOKEN) -> str:
    got = running.start_run(agent, person=person, token=principal_token)
    assert got.run_token, got.decision
    return got.run_token


def counted(running, name: str = "reads", key: str = "principal:driver", start: int = HOUR_START) -> int:
    """The count the checkpoint keeps in its data folder for limit `name` (whatever its window)."""
    with sqlite3.connect(running.data / LIMITS_FILE) as db:
        row = db.execute("SELECT sum(used) FROM counts WHERE limit_name LIKE ? AND key = ? AND window_start = ?",
                         (f"{name}/%", key, start)).fetchone()
    return row[0] or 0


def assert_refused(answer: pb.CheckResponse, name: str = "reads") -> None:
    assert (answer.verdict, answer.code, answer.rule) == (pb.VERDICT_DENY, "limit_exceeded", f"limit:{name}"), answer
    assert not answer.HasField("grant")


def test_calls_past_the_max_are_refused_on_the_record_and_refusals_spend_nothing(limited):
    running = limited()
    token = run_token(running)
    first, second = check(running, token), check(running, token)
    assert first.verdict == second.verdict == pb.VERDICT_ALLOW and second.HasField("grant")
    assert first.reason.endswith("; counted: reads 1/2 per principal:driver in 1h")
    assert second.reason.endswith("; counted: reads 2/2 per principal:driver in 1h")
    third = check(running, token)
    assert_refused(third)
    assert "reads 2/2 per principal:driver in 1h is reached" in third.reason
    record = running.records()[-1]
    assert (record["decision_id"], record["verdict"], record["code"], record["rule"]) == (
        third.decision_id, "DENY", "limit_exceeded", "limit:reads")
    assert record["reason"] == third.reason
    assert "counted: reads 2/2" in running.records()[-2]["reason"]  # the ALLOW's record names its count too
    assert counted(running) == 2  # the refusal counted nothing
    # another tool is not counted; another spelling of the counted one is no tool at all, and spends nothing
    assert check(running, token, "list_templates").verdict == pb.VERDICT_ALLOW
    for spelling in ("GET_TASK", "get_task ", "get-task"):
        assert check(running, token, spelling).code == "unknown_tool"
    assert counted(running) == 2


def test_a_call_refused_before_the_limit_spends_nothing(limited):
    running = limited(limit(max_=1))
    token = run_token(running)
    bad = call(token)
    bad.tool_call.arguments.update({"task_id": "not a task id"})  # refused by the tool's input schema
    assert running.stub().Check(bad, timeout=5).code == "invalid_arguments"
    assert counted(running) == 0
    assert check(running, token).verdict == pb.VERDICT_ALLOW


@pytest.mark.parametrize("per", ["principal", "tenant", "agent", "person"])
def test_each_party_has_a_count_of_its_own(limited, per):
    running = limited(limit(per=per, max_=1))
    first = run_token(running)
    assert check(running, first).verdict == pb.VERDICT_ALLOW
    assert_refused(check(running, first))
    same_party = {  # another run, the same party: still refused
        "principal": lambda: run_token(running, "triage", "bob"),
        "tenant": lambda: run_token(running, "triage", "bob"),
        "agent": lambda: run_token(running, "recon", "bob", BATCH_TOKEN),
        "person": lambda: run_token(running, "triage", "alice", BATCH_TOKEN),
    }[per]()
    principal = BATCH_TOKEN if per in ("agent", "person") else TOKEN
    assert_refused(check(running, same_party, principal_token=principal))
    other = {  # another party, everything else the same as the first
        "principal": lambda: run_token(running, principal_token=BATCH_TOKEN),
        "tenant": lambda: run_token(running, "scout"),
        "agent": lambda: run_token(running, "triage"),
        "person": lambda: run_token(running, person="bob"),
    }[per]()
    answer = check(running, other, principal_token=BATCH_TOKEN if per == "principal" else TOKEN)
    assert answer.verdict == pb.VERDICT_ALLOW, answer


def test_a_count_lives_for_its_window_of_the_checkpoint_clock(limited):
    running = limited(limit(max_=1))
    token = run_token(running)
    assert check(running, token).verdict == pb.VERDICT_ALLOW
    assert_refused(check(running, token))
    running.server.service.clock = lambda: datetime(2026, 3, 2, 11, 0, 0, tzinfo=UTC)  # the next window
    assert check(running, token).verdict == pb.VERDICT_ALLOW
    assert_refused(check(running, token))
    running.server.service.clock = lambda: T  # back in the old window: it is still full
    assert_refused(check(running, token))
    assert counted(running) == 1 and counted(running, start=HOUR_START + 3600) == 1


def test_a_day_window_is_the_utc_day(limited):
    running = limited(limit(max_=1, window="24h"))
    token = run_token(running)
    running.server.service.clock = lambda: datetime(2026, 3, 2, 23, 59, 59, tzinfo=UTC)
    assert check(running, token).verdict == pb.VERDICT_ALLOW
    running.server.service.clock = lambda: datetime(2026, 3, 2, 0, 0, 0, tzinfo=UTC)
    assert_refused(check(running, token))
    running.server.service.clock = lambda: datetime(2026, 3, 3, 0, 0, 0, tzinfo=UTC)
    assert check(running, token).verdict == pb.VERDICT_ALLOW


def test_an_allowed_call_whose_approval_was_spent_gives_its_count_back(limited):
    running = limited(limit(tools="[create_task_from_template]", max_=5))
    run, asked_id = asked(running)
    assert counted(running) == 0  # asking a person counts nothing
    approval = approve(running, run, asked_id).approval_token
    request = approved_call(run, asked_id, approval)
    assert running.stub().Check(request, timeout=5).verdict == pb.VERDICT_ALLOW
    assert counted(running) == 1
    again = running.stub().Check(request, timeout=5)  # decided ALLOW, counted, then its approval is spent
    assert (again.verdict, again.code) == (pb.VERDICT_DENY, "approval_invalid")
    assert counted(running) == 1


def test_a_rule_reads_the_counts_the_checkpoint_read(limited, policy_dir):
    (policy_dir / "rules" / "last-read.yaml").write_text(
        "kind: Rule\nname: last_read_needs_a_person\neffect: approve_if\ntools: [get_task]\n"
        "condition: 'limits.reads.remaining <= 1'\n")
    running = limited(limit(max_=3))
    token = run_token(running)
    assert check(running, token).verdict == pb.VERDICT_ALLOW
    assert check(running, token).verdict == pb.VERDICT_ALLOW
    last = check(running, token)
    assert (last.verdict, last.code) == (pb.VERDICT_REQUIRE_APPROVAL, "approval_required")
    assert counted(running) == 2


def test_a_limits_store_that_cannot_be_read_refuses_only_what_a_limit_counts(limited):
    running = limited()
    token = run_token(running)
    with sqlite3.connect(running.data / LIMITS_FILE) as db:
        db.execute("DROP TABLE counts")
    refused = check(running, token)
    assert (refused.verdict, refused.code, refused.rule) == (pb.VERDICT_DENY, "limit_unavailable", "limits")
    assert running.records()[-1]["code"] == "limit_unavailable"
    assert check(running, token, "list_templates").verdict == pb.VERDICT_ALLOW  # no limit names it


def model_call(token: str, max_tokens: int = 1000) -> pb.CheckRequest:
    return pb.CheckRequest(run=pb.RunContext(run_token=token), model_call=pb.ModelCall(
        provider="anthropic", model="claude-sonnet-4-5", max_tokens=max_tokens, input_tokens=2000))


def test_a_tenants_spend_is_counted_at_each_model_calls_worst_case(limited):
    # claude-sonnet-4-5 at 3 / 15 USD per million: 2000 in + 1000 out at most = 0.021 USD a call
    running = limited("  - {name: acme_spend, counts: spend, per: tenant, window: 24h, max: 0.05}\n")
    token = run_token(running)
    first = running.stub().Check(model_call(token), timeout=5)
    assert first.verdict == pb.VERDICT_ALLOW and first.reason.endswith("counted: acme_spend 0.021/0.05 per tenant:acme in 24h")
    assert running.stub().Check(model_call(token), timeout=5).verdict == pb.VERDICT_ALLOW
    third = running.stub().Check(model_call(token), timeout=5)
    assert (third.verdict, third.code, third.rule) == (pb.VERDICT_DENY, "limit_exceeded", "limit:acme_spend")
    day = int(datetime(2026, 3, 2, tzinfo=UTC).timestamp())
    assert counted(running, "acme_spend", "tenant:acme", day) == 42_000  # millionths of a USD
    # a smaller call still fits what is left (0.008 USD)
    assert running.stub().Check(model_call(token, max_tokens=100), timeout=5).verdict == pb.VERDICT_ALLOW


def test_a_shadow_rule_reads_the_counts_and_is_recorded_beside_the_enforced_answer(limited, policy_dir):
    (policy_dir / "rules" / "shadow-reads.yaml").write_text(
        "kind: Rule\nname: reads_tighter\neffect: deny_if\nmode: shadow\ntools: [get_task]\n"
        "condition: 'limits.reads.used >= 1'\n")
    running = limited(limit(max_=5))
    token = run_token(running)
    check(running, token)
    second = check(running, token)
    assert second.verdict == pb.VERDICT_ALLOW
    record = running.records()[-1]
    assert (record["shadow_verdict"], record["shadow_code"], record["shadow_rule"]) == (
        "DENY", "rule_denied", "rule:reads_tighter")


def test_a_window_edited_starts_its_counts_afresh(policy_dir, tmp_path):
    """1h to 24h: the day's window begins at the same second as its first hour, and must not inherit it."""
    with_limits(policy_dir, limit(max_=1))
    hourly = load_policy_dir(policy_dir)
    instance = policy_dir / "instance.yaml"
    instance.write_text(instance.read_text().replace("window: 1h", "window: 24h"))
    daily = load_policy_dir(policy_dir)
    store = SqliteLimits(tmp_path / LIMITS_FILE)
    counts = LimitCounts(store)
    run = pb.RunContext(tenant="acme", actor_chain=[pb.Actor(kind=pb.ACTOR_KIND_PERSON, id="alice"),
                                                    pb.Actor(kind=pb.ACTOR_KIND_AGENT, id="recon")])
    established = Established(run, "driver", "", hourly.revision)
    midnight = datetime(2026, 3, 2, tzinfo=UTC)
    request = call("token")
    try:
        usage = counts.read(hourly, request, "driver", established, midnight)
        answer, was_counted = counts.count(usage, midnight, pb.CheckResponse(verdict=pb.VERDICT_ALLOW))
        assert was_counted and answer.verdict == pb.VERDICT_ALLOW
        assert counts.read(hourly, request, "driver", established, midnight).uses[0].used == 1
        assert counts.read(daily, request, "driver", established, midnight).uses[0].used == 0
    finally:
        store.close()
