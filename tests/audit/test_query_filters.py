"""`warden audit query|export` filters an auditor asks for, the time window, the default limit,
CSV, a closed pipe, and a plan refused for an off-limits step found by that step's code."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from checkpoint.audit import DecisionLog
from checkpoint.audit.record import format_time
from warden.cli import main

REPO = Path(__file__).resolve().parents[2]
NOW = datetime.now(UTC)
YESTERDAY = format_time(NOW.replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1))
TODAY = format_time(NOW)
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def data(tmp_path, make_record) -> Path:
    data = tmp_path / ".warden"
    with DecisionLog(data / "decisions.db") as log:
        log.append(make_record(time=YESTERDAY, tool="lookup_order", accountable_person="ann", caller="driver",
                               principal="driver", approver="carol", approval_id="dec-approval-1"))
        log.append(make_record(time=TODAY, tenant="globex", tool="refund", accountable_person="bob",
                               verdict="DENY", code="rule_denied", rule="rule:refund-cap", trace_id=TRACE,
                               arguments={"customer": "customer:c-42", "amount": 900}))
        log.append(make_record(time=TODAY, action="approval", tool="refund", verdict="ALLOW", code="approved",
                               rule="approval", caller="carol", principal="people", approver="carol",
                               arguments={"decision_id": "dec-x", "note": "fine"}))
        log.append(make_record(time=TODAY, action="plan", tool=None, verdict="DENY", code="plan_step_not_allowed",
                               rule="plan.step[1]", reason="step 2 (scan) is refused: subject_off_limits: ...",
                               arguments={"steps": [{"id": "list", "tool": "list_templates"},
                                                    {"id": "scan", "tool": "create_task_from_template",
                                                     "verdict": "DENY", "code": "subject_off_limits",
                                                     "reason": "payments.lab.example.com is off-limits"}]}))
    return data


def query(capsys, data: Path, *argv: str) -> list[dict]:
    assert main(["audit", "query", "--data", str(data), "--format", "jsonl", *argv]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line]


@pytest.mark.parametrize("argv,codes", [
    (["--tool", "refund"], ["rule_denied", "approved"]),
    (["--tenant", "globex"], ["rule_denied"]),
    (["--person", "bob"], ["rule_denied"]),
    (["--rule", "rule:refund-cap"], ["rule_denied"]),
    (["--action", "approval"], ["approved"]),
    (["--caller", "carol"], ["approved"]),
    (["--principal", "driver"], ["allowed"]),
    (["--approver", "carol"], ["allowed", "approved"]),  # the approval, and the call it let through
    (["--approval-id", "dec-approval-1"], ["allowed"]),
    (["--trace-id", TRACE], ["rule_denied"]),
    (["--trace-id", TRACE.upper()], []),  # stored as W3C writes it, lowercase
    (["--approver", "ann"], []),
    (["--subject", "customer:c-42"], ["rule_denied"]),
    (["--subject", "payments.lab.example.com"], ["plan_step_not_allowed"]),
    (["--code", "subject_off_limits"], ["plan_step_not_allowed"]),  # the plan, found by its step's code
    (["--since", "yesterday", "--until", "today"], ["allowed"]),
    (["--since", "today"], ["rule_denied", "approved", "plan_step_not_allowed"]),
])
def test_each_filter_picks_exactly_its_records(data, capsys, argv, codes):
    assert [r["code"] for r in query(capsys, data, *argv)] == codes


def test_a_query_shows_a_bounded_page_and_says_more_match(data, capsys):
    assert main(["audit", "query", "--data", str(data), "--format", "jsonl", "--limit", "2"]) == 0
    out = capsys.readouterr()
    assert len(out.out.splitlines()) == 2
    assert "showing the first 2 records; more match" in out.err and "--after 2" in out.err
    assert len(query(capsys, data, "--all")) == 4


def test_limit_and_all_exclude_each_other(data, capsys):
    with pytest.raises(SystemExit) as done:
        main(["audit", "query", "--data", str(data), "--limit", "5", "--all"])
    assert done.value.code == 2


def test_csv_has_a_header_and_json_cells(data, capsys):
    assert main(["audit", "query", "--data", str(data), "--format", "csv", "--tool", "refund"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["code"] for r in rows] == ["rule_denied", "approved"]
    assert json.loads(rows[0]["arguments"]) == {"customer": "customer:c-42", "amount": 900}
    assert rows[0]["parent_run_id"] == "" and rows[0]["hash"]


def test_a_closed_pipe_ends_the_export_quietly(data, make_record):
    with DecisionLog(data / "decisions.db") as log:
        for _ in range(3000):
            log.append(make_record())
    done = subprocess.run(f"{sys.executable} -m warden.cli audit export --data {data} | head -n 1",
                          shell=True, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == 1
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr
