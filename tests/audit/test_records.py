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


def test_arguments_are_stored_as_rfc8785(log, log_path, make_record):
    """1e-7 as RFC 8785 (and Node) write it, not Python's 1e-07; keys in UTF-16 order."""
    import sqlite3

    import rfc8785

    arguments = {"small": 1e-7, "big": 1e21, "whole": 5.0, "\uffff": "bmp", "\U0001f600": "astral 😀"}
    log.append(make_record(arguments=arguments))
    conn = sqlite3.connect(log_path)
    [(text,)] = conn.execute("SELECT arguments FROM decisions")
    conn.close()
    assert text.encode() == rfc8785.dumps(arguments)
    assert '"small":1e-7' in text and '"big":1e+21' in text and '"whole":5' in text
    assert text.index("\U0001f600") < text.index("\uffff")


def test_arguments_without_an_exact_json_number_are_refused(log, make_record):
    with pytest.raises(InvalidAuditRecord, match="2\\*\\*53"):
        log.append(make_record(arguments={"id": 2**60}))


def test_a_row_written_with_the_old_recipe_still_verifies(log, log_path, make_record):
    """Before RFC 8785 the arguments column held Python's number forms (`1e-07`, `5.0`). The
    record hash covers the column's text as stored, so such rows verify unchanged."""
    import sqlite3

    from checkpoint.audit import DecisionLog
    from checkpoint.audit.record import HASHED_FIELDS, record_hash

    log.append(make_record())
    conn = sqlite3.connect(log_path)
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM decisions WHERE seq = 1").fetchone())
    row["arguments"] = '{"amount":5.0,"ratio":1e-07}'  # what the old encoder wrote
    new_hash = record_hash(row["prev_hash"], tuple(row[name] for name in HASHED_FIELDS))
    with conn:
        conn.execute("UPDATE decisions SET arguments = ?, hash = ? WHERE seq = 1", (row["arguments"], new_hash))
    conn.close()
    log.close()
    reopened = DecisionLog(log_path)
    try:
        reopened.append(make_record())
        report = reopened.verify()
        assert report.ok and report.checked == 2, report.summary()
        assert next(iter(reopened.read()))["arguments"] == {"amount": 5.0, "ratio": 1e-07}
    finally:
        reopened.close()
