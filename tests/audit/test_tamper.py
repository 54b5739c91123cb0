"""verify() finds edits and deletions, and says which record and why."""

from __future__ import annotations

import sqlite3

import pytest

from checkpoint.audit import DecisionReader
from checkpoint.audit.record import HASHED_FIELDS, record_hash


@pytest.fixture
def filled(log, log_path, make_record):
    for i in range(10):
        log.append(make_record(verdict="DENY" if i % 3 else "ALLOW"))
    head = log.head()
    log.close()
    return log_path, head


def _sql(path, statement, *params):
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(statement, params)
    conn.close()


def test_untouched_chain_verifies(filled):
    path, head = filled
    report = DecisionReader(path).verify(expect_head=head)
    assert report.ok and report.checked == 10 and (report.head_seq, report.head_hash) == head


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("verdict", "HALT"),
        ("reason", "nothing to see"),
        ("arguments", '{"amount":1}'),
        ("latency_us", 1),
        ("time", "2020-01-01T00:00:00.000000Z"),
    ],
)
def test_update_of_one_field_is_a_hash_mismatch_at_that_record(filled, column, value):
    path, _ = filled
    _sql(path, f"UPDATE decisions SET {column} = ? WHERE seq = 4", value)
    report = DecisionReader(path).verify()
    assert not report.ok
    assert (report.broken_seq, report.reason) == (4, "hash_mismatch")
    assert report.checked == 3


def test_update_with_recomputed_hash_breaks_the_next_link(filled):
    path, _ = filled
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM decisions WHERE seq = 6").fetchone())
    row["verdict"] = "ALLOW"
    forged = record_hash(row["prev_hash"], tuple(row[k] for k in HASHED_FIELDS))
    with conn:
        conn.execute("UPDATE decisions SET verdict = 'ALLOW', hash = ? WHERE seq = 6", (forged,))
    conn.close()
    report = DecisionReader(path).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 7, "broken_link")


def test_delete_of_a_middle_record_is_a_gap(filled):
    path, _ = filled
    _sql(path, "DELETE FROM decisions WHERE seq = 5")
    report = DecisionReader(path).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 5, "gap")
    assert "seq 6" in report.detail


def test_delete_and_renumber_is_still_caught(filled):
    # Closing the gap by renumbering leaves prev_hash pointing at the deleted record.
    path, _ = filled
    _sql(path, "DELETE FROM decisions WHERE seq = 5")
    for seq in range(6, 11):
        _sql(path, "UPDATE decisions SET seq = ? WHERE seq = ?", seq - 1, seq)
    report = DecisionReader(path).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 5, "broken_link")


def test_delete_of_the_first_record_is_a_gap_at_one(filled):
    path, _ = filled
    _sql(path, "DELETE FROM decisions WHERE seq = 1")
    report = DecisionReader(path).verify()
    assert (report.ok, report.broken_seq, report.reason) == (False, 1, "gap")


def test_deleted_tail_is_not_detectable_by_the_chain_alone(filled):
    """A documented limit: the shorter chain is whole. Only a head kept elsewhere shows it."""
    path, head = filled
    _sql(path, "DELETE FROM decisions WHERE seq > 7")
    reader = DecisionReader(path)
    alone = reader.verify()
    assert alone.ok and alone.checked == 7
    anchored = reader.verify(expect_head=head)
    assert (anchored.ok, anchored.reason, anchored.broken_seq) == (False, "truncated", 8)


def test_anchor_with_another_hash_is_a_head_mismatch(filled):
    path, (seq, _) = filled
    report = DecisionReader(path).verify(expect_head=(seq, "f" * 64))
    assert (report.ok, report.reason, report.broken_seq) == (False, "head_mismatch", 10)


def test_anchor_from_earlier_still_verifies_a_longer_log(filled, make_record):
    from checkpoint.audit import DecisionLog

    path, head = filled
    with DecisionLog(path) as reopened:
        reopened.append(make_record())
    report = DecisionReader(path).verify(expect_head=head)
    assert report.ok and report.checked == 11


def _forge_index(path, sql_as_built: str, sql_shown: str) -> None:
    """Build the run_id index as `sql_as_built`, then make the schema say `sql_shown`, so SQLite
    trusts an index whose entries are not its table's (writable_schema, what a file editor does)."""
    _sql(path, "DROP INDEX idx_decisions_run_id")
    _sql(path, sql_as_built)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    with conn:
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'idx_decisions_run_id'", (sql_shown,))
    conn.close()


def test_an_index_edited_to_hide_a_record_from_run_queries_breaks_verify(filled, capsys):
    """The chain is walked in the table; `--run` reads the run_id index. An index rebuilt without
    seq 7's entry hides that decision from every run query, the run view and WatchDecisions by run,
    with every hash intact: verify must not vouch for that file."""
    from warden.cli import main

    path, head = filled
    _forge_index(path, 'CREATE INDEX "idx_decisions_run_id" ON "decisions" ("run_id") WHERE seq <> 7',
                 'CREATE INDEX "idx_decisions_run_id" ON "decisions" ("run_id")')
    reader = DecisionReader(path)
    assert 7 not in [r["seq"] for r in reader.read(run_id="run-1")]  # the attack works on queries
    assert 7 in [r["seq"] for r in reader.read()]
    report = reader.verify(expect_head=head)
    assert (report.ok, report.reason, report.broken_seq) == (False, "index_mismatch", 7)
    assert "run-1" not in report.detail  # seqs only: the web view shows the detail to every auditor
    assert main(["audit", "verify", "--log", str(path)]) == 1
    assert "BROKEN at seq 7: index_mismatch" in capsys.readouterr().err


def test_a_partial_or_expression_index_is_not_vouched_for(filled):
    path, _ = filled
    _sql(path, "CREATE INDEX idx_decisions_tenant ON decisions (tenant) WHERE verdict <> 'ALLOW'")
    report = DecisionReader(path).verify()
    assert (report.ok, report.reason) == (False, "index_mismatch")
    assert "idx_decisions_tenant" in report.detail
