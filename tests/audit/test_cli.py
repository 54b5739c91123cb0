"""`warden audit ...` through the real dispatcher."""

from __future__ import annotations

import json
import os
import selectors
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def data_dir(tmp_path, make_record) -> Path:
    data = tmp_path / ".warden"
    with DecisionLog(data / "decisions.db") as log:
        log.append(
            make_record(
                run_id="r1", root_run_id="r1", verdict="ALLOW", code="allowed", time="2024-01-01T10:00:00.000000Z"
            )
        )
        log.append(make_record(run_id="r2", verdict="DENY", code="tool_not_allowed", agent="ops", tool="rm"))
        log.append(
            make_record(
                run_id="r1-child", root_run_id="r1", verdict="HALT", code="breaker_turns", rule="breaker.turns"
            )
        )
    return data


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line]


@pytest.mark.parametrize("sub", ["tail", "query", "verify", "export", "head", "pubkey", "anchors", "ship"])
def test_every_subcommand_has_help(sub, capsys):
    with pytest.raises(SystemExit) as done:
        main(["audit", sub, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert f"warden audit {sub}" in out and "--data" in out and "--log" in out


def test_audit_without_subcommand_prints_help(capsys):
    assert main(["audit"]) == 2
    assert "verify" in capsys.readouterr().out


def test_query_table_and_filters(data_dir, capsys):
    assert main(["audit", "query", "--data", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "tool_not_allowed" in out and "breaker_turns" in out and "3 record(s)" in out
    assert main(["audit", "query", "--data", str(data_dir), "--run", "r1-child", "--verdict", "halt"]) == 0
    out = capsys.readouterr().out
    assert "breaker_turns" in out and "tool_not_allowed" not in out and "1 record(s)" in out


def test_query_jsonl_with_every_filter(data_dir, capsys):
    def seqs(*extra: str) -> list[int]:
        assert (
            main(["audit", "query", "--log", str(data_dir / "decisions.db"), "--format", "jsonl", *extra])
            == 0
        )
        return [r["seq"] for r in _jsonl(capsys.readouterr().out)]

    assert seqs() == [1, 2, 3]
    assert seqs("--agent", "ops") == [2]
    assert seqs("--code", "breaker_turns") == [3]
    assert seqs("--after", "1", "--limit", "1") == [2]
    assert seqs("--since", "2024-06-01T00:00:00Z") == [2, 3]
    assert seqs("--since", "2024-01-01T10:00:00Z") == [1, 2, 3]
    assert seqs("--since", "2024-01-02") == [2, 3]
    assert seqs("--since", "1h") == [2, 3]  # the first record is stamped in 2024
    assert seqs("--tree", "r1") == [1, 3] and seqs("--tree", "nope") == []


def test_since_rejects_nonsense(data_dir, capsys):
    with pytest.raises(SystemExit):
        main(["audit", "query", "--data", str(data_dir), "--since", "yesterday-ish"])
    assert "RFC 3339" in capsys.readouterr().err


def test_tail_shows_the_last_n(data_dir, capsys):
    assert main(["audit", "tail", "--data", str(data_dir), "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        len(lines) == 2
        and lines[0].split()[0] == "2"
        and "HALT" in lines[1]
        and "rule=breaker.turns" in lines[1]
    )
    assert (
        main(["audit", "tail", "--data", str(data_dir), "-n", "5", "--format", "jsonl", "--verdict", "DENY"])
        == 0
    )
    assert [r["code"] for r in _jsonl(capsys.readouterr().out)] == ["tool_not_allowed"]


def test_verify_exit_codes_name_the_broken_record(data_dir, capsys):
    assert main(["audit", "verify", "--data", str(data_dir)]) == 0
    assert "ok: 3 records" in capsys.readouterr().out
    conn = sqlite3.connect(data_dir / "decisions.db")
    with conn:
        conn.execute("UPDATE decisions SET verdict = 'ALLOW' WHERE seq = 2")
    conn.close()
    assert main(["audit", "verify", "--data", str(data_dir)]) == 1
    err = capsys.readouterr().err
    assert "BROKEN at seq 2" in err and "hash_mismatch" in err


def test_head_anchor_catches_a_deleted_tail(data_dir, capsys):
    assert main(["audit", "head", "--data", str(data_dir)]) == 0
    anchor = capsys.readouterr().out.strip()
    assert anchor.startswith("3:")
    conn = sqlite3.connect(data_dir / "decisions.db")
    with conn:
        conn.execute("DELETE FROM decisions WHERE seq = 3")
    conn.close()
    assert main(["audit", "verify", "--data", str(data_dir)]) == 0
    capsys.readouterr()
    assert main(["audit", "verify", "--data", str(data_dir), "--expect-head", anchor]) == 1
    assert "truncated" in capsys.readouterr().err


def test_export_to_file_and_stdout(data_dir, tmp_path, capsys):
    target = tmp_path / "siem.jsonl"
    assert main(["audit", "export", "--data", str(data_dir), "--output", str(target)]) == 0
    exported = _jsonl(target.read_text())
    assert [r["seq"] for r in exported] == [1, 2, 3]
    assert all(len(r["hash"]) == 64 and len(r["prev_hash"]) == 64 for r in exported)
    assert exported[1]["prev_hash"] == exported[0]["hash"]
    assert isinstance(exported[0]["arguments"], dict) and isinstance(exported[0]["actor_chain"], list)
    assert "exported 3 records" in capsys.readouterr().err
    assert main(["audit", "export", "--data", str(data_dir), "--after", "2"]) == 0
    assert [r["seq"] for r in _jsonl(capsys.readouterr().out)] == [3]


@pytest.mark.parametrize("sub", ["tail", "query", "verify", "export", "head", "pubkey", "anchors"])
def test_missing_log_is_an_error_and_is_not_created(sub, tmp_path, capsys):
    assert main(["audit", sub, "--data", str(tmp_path / "nowhere")]) == 2
    assert "no decision log" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.timeout(60)
def test_tail_follow_prints_new_records_as_they_commit(data_dir, make_record):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "warden.cli",
            "audit",
            "tail",
            "-f",
            "-n",
            "1",
            "--format",
            "jsonl",
            "--data",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
    )
    assert child.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(child.stdout, selectors.EVENT_READ)

    def next_record() -> dict:
        assert selector.select(timeout=30), "no line from tail --follow"
        return json.loads(child.stdout.readline())

    try:
        assert next_record()["seq"] == 3
        with DecisionLog(data_dir / "decisions.db") as log:
            log.append(make_record(decision_id="live-one"))
        record = next_record()
        assert (record["seq"], record["decision_id"]) == (4, "live-one")
    finally:
        child.kill()
        child.wait()


def test_a_log_of_another_schema_is_refused_with_what_to_do(tmp_path):
    """A schema-1 log (no principal, caller, call_digest): the CLI says so and exits 2, no traceback."""
    import sqlite3
    import subprocess
    import sys

    old = tmp_path / "decisions.db"
    conn = sqlite3.connect(old)
    conn.execute("CREATE TABLE decisions (seq INTEGER PRIMARY KEY, decision_id TEXT, hash TEXT)")
    conn.commit()
    conn.close()
    for command in ("tail", "verify"):
        got = subprocess.run([sys.executable, "-m", "warden.cli", "audit", command, "--log", str(old)],
                             capture_output=True, text=True, timeout=60)
        assert got.returncode == 2 and "schema mismatch" in got.stderr and "move it aside" in got.stderr, command
        assert "Traceback" not in got.stderr


def test_an_incremental_export_past_a_prune_is_refused_not_shortened(tmp_path, make_record, capsys):
    """`export --after N` is the documented incremental shipping: when the records after N were
    pruned before it ran, reading on from the oldest record kept would hide that they existed."""
    data = tmp_path / "data"
    with DecisionLog(data / "decisions.db") as log:
        for _ in range(10):
            log.append(make_record())
    assert main(["audit", "rotate", "--data", str(data)]) == 0  # seals 1..9
    assert main(["audit", "prune", "--data", str(data), "--before", "10"]) == 0
    capsys.readouterr()
    out = tmp_path / "since-4.jsonl"
    assert main(["audit", "export", "--data", str(data), "--after", "4", "-o", str(out)]) == 1
    assert "records 5..9 were pruned" in capsys.readouterr().err and not out.exists()
    assert main(["audit", "export", "--data", str(data), "--after", "9"]) == 0
    assert [r["seq"] for r in map(json.loads, capsys.readouterr().out.splitlines())] == [10]
    assert main(["audit", "export", "--data", str(data)]) == 0  # a whole export: what the log holds
    assert [r["seq"] for r in map(json.loads, capsys.readouterr().out.splitlines())] == [10]


def test_a_misspelt_code_is_named_with_the_one_meant(data_dir, capsys):
    assert main(["audit", "query", "--data", str(data_dir), "--code", "alowed"]) == 0
    captured = capsys.readouterr()
    assert "0 record(s)" in captured.out
    assert "'alowed' is not one of warden's codes" in captured.err and "did you mean 'allowed'" in captured.err
    # a known code that matches nothing, and a rule's own code, get no such line
    assert main(["audit", "query", "--data", str(data_dir), "--code", "rule_denied"]) == 0
    assert "did you mean" not in capsys.readouterr().err
    assert main(["audit", "query", "--data", str(data_dir), "--code", "Breaker_Turns", "--format", "jsonl"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "did you mean 'breaker_turns'" in captured.err


def test_the_table_never_folds_a_run_id(tmp_path, make_record, capsys):
    data = tmp_path / ".warden"
    long_run = "run-" + "0123456789abcdef" * 3
    with DecisionLog(data / "decisions.db") as log:
        log.append(make_record(run_id=long_run, verdict="DENY", code="subject_off_limits",
                               reason="a long reason " * 30, tool="fetch_url"))
    assert main(["audit", "query", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert long_run in out and "subject_off_limits" in out  # each on one line, whole
