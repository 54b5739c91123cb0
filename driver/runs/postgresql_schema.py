"""The driver's tables on a shared PostgreSQL store: the same tables as the SQLite file
(sqlite_schema.py says what each keeps), each named `driver_<table>`, with the same columns, so a
row reads back through the same functions (run_row, call_row, approval_row, pause_row).

Scripts are only ever appended (warden/store/migrations.py); `warden store migrate` applies them.
"""

from __future__ import annotations

from typing import Any

from driver.runs.sqlite_schema import CALL_COLUMNS, PAUSE_COLUMNS, RECEIPT_COLUMNS, RUN_COLUMNS
from warden.store.migrations import Schema

CHANNEL = "warden_driver_runs"  # NOTIFY payload: the run id whose events or status changed

_PG_TYPE = {str: "text NOT NULL DEFAULT ''", int: "bigint NOT NULL DEFAULT 0",
            float: "double precision NOT NULL DEFAULT 0", bytes: "bytea NOT NULL DEFAULT ''"}


def q(name: str) -> str:
    """A column name quoted: some of them (`grant`, `call`) are words of SQL."""
    return f'"{name}"'


def _columns(columns: dict[str, Any], *, pk: str, serial: bool = False) -> str:
    out = []
    for name, typ in columns.items():
        if name == pk and serial:
            out.append(f"{q(name)} bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY")
        elif name == pk:
            out.append(f"{q(name)} text PRIMARY KEY")
        else:
            out.append(f"{q(name)} {_PG_TYPE[typ]}")
    return ",\n    ".join(out)


_APPROVAL_COLUMNS_1: dict[str, Any] = {
    "approval_id": str, "run_id": str, "call": int, "decision_id": str, "tool": str,
    "arguments": str, "code": str, "rule": str, "reason": str, "status": str,
    "decided_by": str, "decided_at": float, "note": str, "created_at": float, "token": str,
}

_VERSION_1 = f"""
CREATE TABLE driver_runs (
    {_columns(RUN_COLUMNS, pk="run_id")}
);
CREATE INDEX driver_runs_status ON driver_runs (status, created_at);
CREATE INDEX driver_runs_parent ON driver_runs (parent_run_id);
CREATE INDEX driver_runs_root ON driver_runs (root_run_id);
CREATE TABLE driver_goals (
    run_id text NOT NULL, version bigint NOT NULL, goal text NOT NULL, author text NOT NULL,
    created_at double precision NOT NULL, PRIMARY KEY (run_id, version)
);
CREATE TABLE driver_events (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, run_id text NOT NULL,
    time double precision NOT NULL, kind text NOT NULL, data text NOT NULL
);
CREATE INDEX driver_events_run ON driver_events (run_id, seq);
CREATE TABLE driver_transcript (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, run_id text NOT NULL, entry text NOT NULL
);
CREATE INDEX driver_transcript_run ON driver_transcript (run_id, id);
CREATE TABLE driver_calls (
    {_columns(CALL_COLUMNS, pk="id", serial=True)}
);
CREATE INDEX driver_calls_run ON driver_calls (run_id, turn);
CREATE INDEX driver_calls_child ON driver_calls (child_run_id) WHERE child_run_id <> '';
CREATE TABLE driver_approvals (
    {_columns(_APPROVAL_COLUMNS_1, pk="approval_id")}
);
CREATE INDEX driver_approvals_run ON driver_approvals (run_id, created_at);
CREATE TABLE driver_receipts (
    {_columns(RECEIPT_COLUMNS, pk="decision_id")},
    ord bigint GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX driver_receipts_run ON driver_receipts (run_id, created_at);
CREATE TABLE driver_spend (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, day text NOT NULL, owner text NOT NULL,
    tenant text NOT NULL, run_id text NOT NULL, usd double precision NOT NULL
);
CREATE INDEX driver_spend_day ON driver_spend (day, owner);
CREATE TABLE driver_pauses (
    {_columns(PAUSE_COLUMNS, pk="pause_id")},
    ord bigint GENERATED ALWAYS AS IDENTITY
);
-- one open pause per run: a second person's pause while one is under way is refused
CREATE UNIQUE INDEX driver_pauses_open ON driver_pauses (run_id) WHERE state IN ('intent', 'recorded');
"""

# an approval's deadline (the checkpoint's approval_deadline), so a waiting run is told when it passes
_VERSION_2 = """
ALTER TABLE driver_approvals ADD COLUMN deadline double precision NOT NULL DEFAULT 0;
"""
APPROVAL_COLUMNS: dict[str, Any] = {**_APPROVAL_COLUMNS_1, "deadline": float}

# The leases of the drivers that run durable workflows (driver/durable/leases.py): one row per
# driver process start, renewed by the database's clock; `dead` is set once, by one judge, and a
# dead row is never renewed again (fencing).
_VERSION_3 = """
CREATE TABLE driver_leases (
    executor_id text PRIMARY KEY,
    run_model_version text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    beat timestamptz NOT NULL DEFAULT now(),
    dead boolean NOT NULL DEFAULT false,
    judged_by text NOT NULL DEFAULT '',
    judged_at timestamptz
);
"""

SCHEMA = Schema("runs", (_VERSION_1, _VERSION_2, _VERSION_3))
