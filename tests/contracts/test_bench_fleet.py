"""`python -m bench fleet` runs end to end with tiny counts: real checkpoints on SQLite and on the
test PostgreSQL answer, every answer has its record, and each figure is printed, the checkpoints' CPU per decision among them."""

from __future__ import annotations

import re

from bench.bench_fleet import _spread, main


def test_the_fleet_bench_measures_every_configuration(pg_server, capsys) -> None:
    # bounded by the count: 30 calls end a measurement long before 30 seconds, even on a busy box
    assert main(["--replicas", "2", "--sqlite", "FULL", "--seconds", "30", "--calls", "30", "--runs", "1",
                 "--records", "5", "--concurrency", "4", "--store", pg_server.url()]) == 0
    out = capsys.readouterr().out
    for label in ("SQLite, --durability FULL", "PostgreSQL, 2 replicas"):
        # 30 measured calls and 20 warm-up calls per checkpoint, each answered ALLOW and recorded
        answers = re.search(rf"run 1: {re.escape(label)} +[\d,]+ decisions/s.*\(([\d,]+) answers, each recorded\)", out)
        assert answers, out
        assert int(answers[1].replace(",", "")) == 30 + 20 * (2 if "2 replicas" in label else 1)
        row = re.search(rf"^{re.escape(label)} +([\d,]+) +0% +([\d,]+) +0% +([\d,]+) +0% +([\d,]+)$", out, re.M)
        assert row and all(int(x.replace(",", "")) > 0 for x in row.groups()), out
    cost = re.search(r"one decision's write.*: SQLite NORMAL ([\d,]+) us, SQLite FULL ([\d,]+) us, "
                     r"PostgreSQL ([\d,]+) us", out)
    assert cost and all(int(x.replace(",", "")) > 0 for x in cost.groups()), out


def test_spread_is_the_range_over_the_mean() -> None:
    assert _spread([100.0, 50.0]) == "67%"
    assert _spread([80.0]) == "0%"
