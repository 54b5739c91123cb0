"""Schema version 3: the shadow answer's columns."""

from __future__ import annotations

import sqlite3

import pytest

from checkpoint.audit import AuditUnavailable, DecisionLog, InvalidAuditRecord
from checkpoint.audit.record import COLUMNS, HASHED_FIELDS
from checkpoint.audit.store import SCHEMA_VERSION


def test_schema_3_hashes_the_shadow_columns(log, log_path, make_record):
    assert SCHEMA_VERSION >= 3
    assert HASHED_FIELDS[24:27] == ("shadow_verdict", "shadow_code", "shadow_rule")
    log.append(make_record(shadow_verdict="DENY", shadow_code="policy_denied", shadow_rule="rule:x"))
    log.append(make_record())
    assert log.verify().ok
    conn = sqlite3.connect(log_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    with conn:  # an edited shadow answer breaks the chain like any other field
        conn.execute("UPDATE decisions SET shadow_verdict = 'ALLOW' WHERE seq = 1")
    conn.close()
    report = log.verify()
    assert not report.ok


def test_a_shadow_verdict_must_be_a_verdict(log, make_record):
    with pytest.raises(InvalidAuditRecord, match="shadow_verdict"):
        log.append(make_record(shadow_verdict="MAYBE"))


def test_a_schema_2_log_is_refused_with_what_to_do(tmp_path):
    old = tmp_path / "decisions.db"
    conn = sqlite3.connect(old)
    v2 = [c for c in COLUMNS if not c.startswith("shadow_")]
    conn.execute(f"CREATE TABLE decisions ({', '.join(v2)})")
    conn.execute("PRAGMA user_version=2")
    conn.commit()
    conn.close()
    with pytest.raises(AuditUnavailable, match="move it aside"):
        DecisionLog(old)
