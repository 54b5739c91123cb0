"""Limits across runs on a fleet: two checkpoint replicas (real gRPC servers, a data folder each) on one
PostgreSQL count in one table, so N replicas enforce one limit. At max-1, calls sent to both at once
give exactly one ALLOW; a decision that read room left but finds the count taken at its conditional
increment becomes the limit's refusal before its record."""

from __future__ import annotations

import psycopg
import pytest

from checkpoint.server.limit_store_pg import COUNTS
from warden.checkpoint.v1 import checkpoint_pb2 as pb

from .test_checkpoint_fleet import _at_once
from .test_checkpoint_fleet import fleet as fleet  # noqa: F401 - the fixture, with limits set first
from .test_limits import T, check, limit, run_token, with_limits


@pytest.fixture
def limited_fleet(policy_dir, request):
    with_limits(policy_dir, limit(max_=3))
    a, b = request.getfixturevalue("fleet")
    for replica in (a, b):
        replica.server.service.clock = lambda: T
    return a, b


def _count(pg_url: str) -> int:
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(f"SELECT coalesce(sum(used), 0) FROM {COUNTS} WHERE limit_name LIKE 'reads/%'").fetchone()
    return int(row[0]) if row else 0


def test_calls_at_max_minus_one_sent_to_both_replicas_at_once_allow_exactly_once(limited_fleet, pg_url):
    a, b = limited_fleet
    token = run_token(a)
    for _ in range(5):
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {COUNTS}")
        assert check(a, token).verdict == pb.VERDICT_ALLOW
        assert check(b, token).verdict == pb.VERDICT_ALLOW  # one count for both: 2 of 3
        answers = _at_once(*(lambda r=r: check(r, token) for r in (a, b, a, b, a, b, a, b)))
        allowed = [x for x in answers if x.verdict == pb.VERDICT_ALLOW]
        assert len(allowed) == 1, [(x.verdict, x.code, x.reason) for x in answers]
        assert allowed[0].HasField("grant") and allowed[0].reason.endswith("reads 3/3 per principal:driver in 1h")
        for refused in (x for x in answers if x.verdict != pb.VERDICT_ALLOW):
            assert (refused.verdict, refused.code, refused.rule) == (pb.VERDICT_DENY, "limit_exceeded", "limit:reads")
            assert not refused.HasField("grant")
        assert _count(pg_url) == 3
    # every answer is on the one log the replicas share, the refusals with the limit that gave them
    records = [r for r in b.records() if r["action"] == "tool_call"]
    assert len(records) == 5 * 10
    assert sum(r["code"] == "limit_exceeded" and r["rule"] == "limit:reads" for r in records) == 5 * 7


class _ReadThenAnotherCounts:
    """The replica's own store, but between its read and its count another replica takes the last of
    the limit (what a race does, made certain)."""

    def __init__(self, store, other):
        self.store, self.other = store, other

    def used(self, buckets):
        found = self.store.used(buckets)
        assert self.other().verdict == pb.VERDICT_ALLOW
        return found

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_count_taken_by_another_replica_after_the_read_refuses_before_the_record(limited_fleet, pg_url):
    a, b = limited_fleet
    token = run_token(a)
    assert check(a, token).verdict == check(a, token).verdict == pb.VERDICT_ALLOW  # 2 of 3
    counts = a.server.service.limit_counts
    counts.store = _ReadThenAnotherCounts(counts.store, lambda: check(b, token))
    answer = check(a, token)  # read 2 of 3, decided ALLOW; B took the third meanwhile
    assert (answer.verdict, answer.code, answer.rule) == (pb.VERDICT_DENY, "limit_exceeded", "limit:reads")
    assert "reached by another decision after this one read its count" in answer.reason
    assert not answer.HasField("grant")
    record = next(r for r in a.records() if r["decision_id"] == answer.decision_id)
    assert (record["verdict"], record["code"], record["rule"]) == ("DENY", "limit_exceeded", "limit:reads")
    assert _count(pg_url) == 3
