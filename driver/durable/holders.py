"""Who holds a durable run: the driver whose executor owns the run's open workflow, and how that
driver's lease stands (leases.py), for `warden runs` and the Run message.

A run is held by the executor DBOS lists on its workflow while the workflow is open (pending);
a finished run, or one on a SQLite store, is held by nobody. The lease's expiry is its last
renewal plus the TTL of the driver asking (every driver of a fleet is given the same TTL), by
the database's clock. A holder is dead when a judge marked its lease dead, or when the lease is
past its TTL and not judged yet, or when it has no lease row at all: a run held by a dead driver
is about to be (or being) taken over by a live one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from warden.store.pg import Database


@dataclass(frozen=True)
class Holder:
    executor_id: str
    expires_at: float  # seconds since the epoch; 0 when the holder has no lease row
    dead: bool


def holders(db: Database, run_ids: Iterable[str], ttl_seconds: float, schema: str = "dbos") -> dict[str, Holder]:
    """The holder of each of `run_ids` that has an open workflow, by run id (one query)."""
    ids = {f"run:{run_id}": run_id for run_id in run_ids}
    if not ids:
        return {}
    with db.connection() as conn:
        rows = conn.execute(
            f"SELECT w.workflow_uuid, w.executor_id, "  # noqa: S608 - the schema is a constant, not input
            "COALESCE(extract(epoch FROM l.beat + make_interval(secs => %s)), 0)::float8, "
            "l.executor_id IS NULL OR l.dead OR l.beat < now() - make_interval(secs => %s) "
            f"FROM {schema}.workflow_status w LEFT JOIN driver_leases l ON l.executor_id = w.executor_id "
            "WHERE w.workflow_uuid = ANY(%s) AND w.status IN ('PENDING', 'ENQUEUED')",
            (ttl_seconds, ttl_seconds, list(ids))).fetchall()
    return {ids[wid]: Holder(str(executor), float(expires), bool(dead)) for wid, executor, expires, dead in rows}


def runs_held_by(db: Database, executor_id: str, schema: str = "dbos") -> int:
    """How many open workflows `executor_id` holds (warden_driver_leases_held)."""
    with db.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {schema}.workflow_status "  # noqa: S608 - a constant
                           "WHERE executor_id = %s AND status IN ('PENDING', 'ENQUEUED')", (executor_id,)).fetchone()
    return int(row[0]) if row else 0
