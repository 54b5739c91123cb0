"""The decision log's tables on PostgreSQL: one table every checkpoint replica appends to.

Columns and hash are those of the SQLite log's current schema (record.py), so a record verifies the
same on either backend and `warden store copy` has nothing to convert. The table is partitioned by
ranges of seq (PARTITION_SEQS records each): a partition is created by the writer that first needs
it, under the chain's lock, so old records can later be exported and dropped a partition at a time
instead of deleted row by row. Scripts are only ever appended (warden/store/migrations.py).
"""

from __future__ import annotations

from warden.store.migrations import Schema

TABLE = "audit_decisions"
PARTITION_SEQS = 1_000_000
# pg_advisory_xact_lock key of the one chain ("wdlg"): every writer links its records to the head it
# reads while it holds this lock, so the chain has one order whatever the number of replicas
CHAIN_LOCK = 0x77646C67

_V1 = f"""
CREATE TABLE {TABLE} (
    seq bigint NOT NULL,
    decision_id text NOT NULL,
    time text NOT NULL,
    tenant text,
    run_id text,
    root_run_id text,
    parent_run_id text,
    actor_chain text,
    accountable_person text,
    agent text,
    agent_version text,
    action text NOT NULL,
    tool text,
    arguments text,
    verdict text NOT NULL,
    code text,
    rule text,
    reason text,
    policy_revision text,
    latency_us bigint,
    principal text,
    caller text,
    call_digest text,
    approval_rules text,
    shadow_verdict text,
    shadow_code text,
    shadow_rule text,
    approver text,
    approval_id text,
    trace_id text,
    prev_hash text NOT NULL,
    hash text NOT NULL,
    PRIMARY KEY (seq)
) PARTITION BY RANGE (seq);
CREATE INDEX {TABLE}_run_id ON {TABLE} (run_id);
CREATE INDEX {TABLE}_agent ON {TABLE} (agent);
"""

# Retention (checkpoint/audit/pg_retention.py): one row per partition sealed by `warden audit rotate`,
# holding its signed seal line (segments.Seal, the same line the archive's manifest holds) and its
# time range; a prune marks it dropped or detached, with a signed prune line. The decisions table
# itself was partitioned from version 1, so no table is converted.
PARTITIONS = "audit_partitions"
_V2 = f"""
CREATE TABLE {PARTITIONS} (
    number integer PRIMARY KEY,
    first_seq bigint NOT NULL,
    last_seq bigint NOT NULL,
    first_time text NOT NULL,
    last_time text NOT NULL,
    records bigint NOT NULL,
    last_hash text NOT NULL,
    seal text NOT NULL,
    sealed_at timestamptz NOT NULL DEFAULT now(),
    removed text CHECK (removed IN ('dropped', 'detached')),
    prune text,
    removed_at timestamptz
);
"""

SCHEMA = Schema("decisions", (_V1, _V2))


def partition_of(seq: int, size: int = PARTITION_SEQS) -> int:
    """The number of the partition that holds `seq` (from 1): partition n holds n*size+1 .. (n+1)*size."""
    return (seq - 1) // size


def create_partition_sql(number: int, size: int = PARTITION_SEQS) -> str:
    low, high = number * size + 1, (number + 1) * size + 1
    return (f"CREATE TABLE IF NOT EXISTS {TABLE}_p{number} PARTITION OF {TABLE} "
            f"FOR VALUES FROM ({low}) TO ({high})")
