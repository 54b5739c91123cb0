"""Schema 4 (approver, approval_id, trace_id), and logs of older schemas still read and verify:
each record hashes exactly the fields its own file has (docs/audit.md, "Hash chain")."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.audit import AuditUnavailable, DecisionLog, DecisionReader
from checkpoint.audit.record import COLUMNS, SCHEMA_COLUMNS
from checkpoint.audit.store import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


def test_schema_4_hashes_the_new_columns(log, log_path, make_record):
    assert SCHEMA_VERSION == 4 and COLUMNS[-5:-2] == ("approver", "approval_id", "trace_id")
    log.append(make_record(approver="carol", approval_id="dec-a", trace_id="4bf92f3577b34da6a3ce929d0e0e4736"))
    log.append(make_record())
    assert log.verify().ok
    for column, value in (("approver", "mallory"), ("approval_id", "dec-b"), ("trace_id", None)):
        conn = sqlite3.connect(log_path)
        with conn:
            conn.execute(f"UPDATE decisions SET {column} = ? WHERE seq = 1", (value,))
        conn.close()
        assert log.verify().reason == "hash_mismatch", column
        conn = sqlite3.connect(log_path)
        with conn:  # put it back for the next column
            conn.execute("UPDATE decisions SET approver = 'carol', approval_id = 'dec-a', "
                         "trace_id = '4bf92f3577b34da6a3ce929d0e0e4736' WHERE seq = 1")
        conn.close()
    assert log.verify().ok


def _old_log(path: Path, version: int, n: int = 5, *, tamper: int | None = None) -> list[str]:
    """A log as warden of schema `version` wrote it, hashed here independently of warden's code:
    sha256(prev || JSON of every column but the chain ones, keys sorted, no spaces)."""
    columns = SCHEMA_COLUMNS[version]
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE decisions ({', '.join(columns)}, PRIMARY KEY (seq))")
    conn.execute(f"PRAGMA user_version={version}")
    prev, hashes = "0" * 64, []
    for seq in range(1, n + 1):
        row = {name: None for name in columns[:-2]}
        row |= {"seq": seq, "decision_id": f"d-{seq}", "time": f"2025-01-31T09:15:0{seq}.000000Z",
                "action": "approval" if seq == 2 else "tool_call", "verdict": "ALLOW", "tenant": "acme",
                "arguments": '{"note":"café"}', "latency_us": 7, "run_id": "r-1"}
        if "caller" in row:
            row["caller"] = "carol" if seq == 2 else "driver"
        body = json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest = hashlib.sha256((prev + body).encode()).hexdigest()
        if seq == tamper:
            row["tenant"] = "globex"
        conn.execute(f"INSERT INTO decisions VALUES ({', '.join('?' * len(columns))})",
                     [*row.values(), prev, digest])
        prev = digest
        hashes.append(digest)
    conn.commit()
    conn.close()
    return hashes


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_log_of_an_older_schema_still_verifies_and_reads(tmp_path, version):
    path = tmp_path / "decisions.db"
    hashes = _old_log(path, version)
    reader = DecisionReader(path)
    report = reader.verify()
    assert report.ok and report.checked == 5 and report.head_hash == hashes[-1], report.summary()
    records = list(reader.read())
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert all(r["trace_id"] is None and r["approver"] is None for r in records)  # columns it lacks read as null
    assert list(reader.read(trace_id="4bf92f3577b34da6a3ce929d0e0e4736")) == []
    # before schema 4 the approver was the caller of an approval: --approver still finds it
    expected = [2] if version >= 2 else []
    assert [r["seq"] for r in reader.read(approver="carol")] == expected
    got = subprocess.run([sys.executable, "-m", "warden.cli", "audit", "verify", "--log", str(path)],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert got.returncode == 0 and "ok: 5 records" in got.stdout, got.stderr


@pytest.mark.parametrize("version", [1, 3])
def test_a_tampered_old_log_is_caught(tmp_path, version):
    path = tmp_path / "decisions.db"
    _old_log(path, version, tamper=3)
    report = DecisionReader(path).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 3, "hash_mismatch")


def test_this_version_does_not_append_to_an_older_log(tmp_path):
    path = tmp_path / "decisions.db"
    _old_log(path, 3)
    with pytest.raises(AuditUnavailable, match="schema 3.*reads and verifies it.*move it aside"):
        DecisionLog(path)
    assert DecisionReader(path).verify().ok  # untouched


def test_a_log_of_no_known_schema_is_refused(tmp_path):
    path = tmp_path / "decisions.db"
    conn = sqlite3.connect(path)
    conn.execute(f"CREATE TABLE decisions ({', '.join(COLUMNS[:-3])}, extra, prev_hash, hash)")
    conn.commit()
    conn.close()
    with pytest.raises(AuditUnavailable, match="no warden schema"):
        DecisionReader(path).verify()
