"""What append() accepts, and how a malformed record fails closed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from checkpoint.audit import AuditUnavailable, InvalidAuditRecord


@pytest.mark.parametrize(
    "overrides",
    [
        {"surprise": 1},
        {"verdict": "MAYBE"},
        {"verdict": None},
        {"action": "shell"},
        {"latency_us": 1.5},
        {"latency_us": True},
        {"latency_us": 2**60},
        {"agent": 7},
        {"arguments": ["not", "a", "mapping"]},
        {"arguments": {"x": float("nan")}},
        {"arguments": {"x": object()}},
        {"actor_chain": "ann"},
        {"time": "2024-01-01 00:00:00"},
        {"time": datetime(2024, 1, 1)},  # naive
        {"reason": "lone \ud800 surrogate"},
    ],
)
def test_malformed_records_are_refused_with_the_audit_code(log, make_record, overrides):
    with pytest.raises(InvalidAuditRecord) as caught:
        log.append(make_record(**overrides))
    assert isinstance(caught.value, AuditUnavailable) and isinstance(caught.value, ValueError)
    assert caught.value.code == "audit_unavailable"
    assert list(log.read()) == []
    assert log.append(make_record()) == 1  # the log itself is unharmed


def test_defaults_fill_id_and_time_and_nulls(log):
    before = datetime.now(UTC)
    log.append({"action": "model_call", "verdict": "DENY", "code": "breaker_tokens"})
    [stored] = list(log.read())
    assert len(stored["decision_id"]) == 32
    assert before - timedelta(seconds=1) <= datetime.fromisoformat(stored["time"]) <= datetime.now(UTC)
    assert stored["arguments"] is None and stored["tool"] is None and stored["actor_chain"] is None


def test_given_time_is_normalised_to_utc(log, make_record):
    moment = datetime(2024, 5, 1, 14, 0, 0, 123, tzinfo=timezone(timedelta(hours=2)))
    log.append(make_record(time=moment))
    log.append(make_record(time="2024-05-01T12:00:00.000123Z"))
    assert [r["time"] for r in log.read()] == ["2024-05-01T12:00:00.000123Z"] * 2


def test_arguments_are_stored_canonically(log, log_path, make_record):
    import sqlite3

    log.append(make_record(arguments={"b": 1, "a": {"z": "é", "y": [1, 2.5]}}))
    conn = sqlite3.connect(log_path)
    [(text,)] = conn.execute("SELECT arguments FROM decisions")
    conn.close()
    assert text == '{"a":{"y":[1,2.5],"z":"é"},"b":1}'
