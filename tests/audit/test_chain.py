"""The chain stays whole under concurrency and across restarts."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog, DecisionReader

GENESIS = "0" * 64


def _jcs(value: object) -> str:
    """An independent canonical JSON (RFC 8785) for strings, integers and null: what an
    auditor's own tool would produce, written without the module under test."""
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        out = ['"']
        for ch in value:
            code = ord(ch)
            if ch == '"':
                out.append('\\"')
            elif ch == "\\":
                out.append("\\\\")
            elif ch in "\b\f\n\r\t":
                out.append({"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
            elif code < 0x20:
                out.append(f"\\u{code:04x}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_jcs(k)}:{_jcs(value[k])}" for k in sorted(value)) + "}"
    raise TypeError(type(value))


def _reverify_with_plain_sqlite(path: Path) -> int:
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    prev, count = GENESIS, 0
    for row in conn.execute("SELECT * FROM decisions ORDER BY seq"):
        fields = {k: row[k] for k in row.keys() if k not in ("prev_hash", "hash")}
        assert row["prev_hash"] == prev
        digest = hashlib.sha256((prev + _jcs(fields)).encode("utf-8")).hexdigest()
        assert digest == row["hash"], f"seq {row['seq']}"
        prev, count = row["hash"], count + 1
    conn.close()
    return count


def test_first_record_links_to_genesis_and_fields_round_trip(log, make_record):
    record = make_record(reason='quote " backslash \\ newline \n tab \t ctrl \x01 ünï')
    seq = log.append(record)
    assert seq == 1
    [stored] = list(log.read())
    assert stored["prev_hash"] == GENESIS
    for name, value in record.items():
        assert stored[name] == value, name
    assert stored["time"].endswith("Z") and len(stored["time"]) == len("2024-01-01T00:00:00.000000Z")


@pytest.mark.timeout(120)
def test_concurrent_appends_form_one_gapless_chain(log, log_path, make_record):
    threads, per_thread = 16, 150
    results: dict[str, int] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        try:
            for i in range(per_thread):
                record = make_record(decision_id=f"t{t}-{i}", run_id=f"run-{t}")
                seq = log.append(record)
                with lock:
                    results[record["decision_id"]] = seq
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assert below
            errors.append(exc)

    workers = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    total = threads * per_thread
    assert sorted(results.values()) == list(range(1, total + 1))
    stored = {r["seq"]: r["decision_id"] for r in log.read()}
    assert stored == {seq: decision_id for decision_id, seq in results.items()}
    # Every thread's own records come back in the order it appended them.
    for t in range(threads):
        seqs = [results[f"t{t}-{i}"] for i in range(per_thread)]
        assert seqs == sorted(seqs)
    report = log.verify()
    assert report.ok and report.checked == total and report.head_seq == total
    assert log.stats()["batches"] < total  # group commit shared commits between threads
    assert _reverify_with_plain_sqlite(log_path) == total


def test_reopen_resumes_the_chain(log_path, make_record):
    with DecisionLog(log_path) as first:
        for _ in range(5):
            first.append(make_record())
        head = first.head()
    assert head[0] == 5
    with DecisionLog(log_path) as second:
        assert second.stats()["committed_seq"] == 5
        assert second.append(make_record()) == 6
        records = list(second.read(after_seq=5))
        assert records[0]["prev_hash"] == head[1]
        assert second.verify().ok
    assert DecisionReader(log_path).verify().checked == 6


def test_read_filters_and_limits(log, make_record):
    log.append(make_record(run_id="a", verdict="ALLOW", code="allowed"))
    log.append(make_record(run_id="b", verdict="DENY", code="tool_not_allowed", agent="ops"))
    log.append(make_record(run_id="a", verdict="DENY", code="rule_denied"))
    log.append(make_record(run_id="a", verdict="HALT", code="breaker_turns"))
    assert [r["seq"] for r in log.read(run_id="a")] == [1, 3, 4]
    assert [r["seq"] for r in log.read(verdict="DENY")] == [2, 3]
    assert [r["seq"] for r in log.read(agent="ops")] == [2]
    assert [r["seq"] for r in log.read(code="breaker_turns")] == [4]
    assert [r["seq"] for r in log.read(after_seq=1, run_id="a", limit=1)] == [3]
    assert [r["seq"] for r in log.tail(2)] == [3, 4]
    assert [r["seq"] for r in log.tail(5, verdict="DENY")] == [2, 3]


def test_a_whole_delegation_tree_is_read_by_its_root(log, make_record):
    log.append(make_record(run_id="root", root_run_id="root"))
    log.append(make_record(run_id="child", root_run_id="root", parent_run_id="root"))
    log.append(make_record(run_id="other", root_run_id="other"))
    log.append(make_record(run_id="grandchild", root_run_id="root", parent_run_id="child"))
    assert [r["run_id"] for r in log.read(root_run_id="root")] == ["root", "child", "grandchild"]
    assert [r["run_id"] for r in log.tail(1, root_run_id="root")] == ["grandchild"]
    # a root logged without root_run_id (by a caller that sent none, before the service filled it)
    log.append(make_record(run_id="old-root", root_run_id=None))
    assert [r["run_id"] for r in log.read(root_run_id="old-root")] == ["old-root"]


def test_read_pages_through_more_than_one_page(log, make_record):
    from checkpoint.audit import reader

    for _ in range(reader.PAGE + 7):
        log.append(make_record())
    assert [r["seq"] for r in log.read()] == list(range(1, reader.PAGE + 8))
    assert len(list(log.read(limit=reader.PAGE + 3))) == reader.PAGE + 3


def test_synchronous_full_is_accepted_and_set(log_path, make_record):
    with DecisionLog(log_path, synchronous="FULL") as full:
        full.append(make_record())
        assert full._conn is not None
        assert full._conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert full._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_two_writers_on_one_file_still_form_one_chain(log_path, make_record):
    # Each transaction reads the head after taking the write lock, so a second writer (another
    # replica pointed at the same file by mistake) interleaves instead of forking the chain.
    with DecisionLog(log_path) as one, DecisionLog(log_path) as two:
        seqs = [(one if i % 2 else two).append(make_record()) for i in range(20)]
        assert seqs == list(range(1, 21))
        assert one.verify().ok and one.verify().checked == 20
