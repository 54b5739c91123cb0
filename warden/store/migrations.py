"""Versioned schemas on a PostgreSQL store.

Each store (decisions, receipts, runs, ...) is a component with its own numbered list of SQL
scripts; the table `warden_schema` keeps the version each component's tables are at. `warden store
migrate` applies what is missing, one transaction per script, under an advisory lock so that two
nodes migrating at once apply each script once. At start, a process checks that every component it
uses is exactly at the version it knows: missing means "run warden store migrate"; newer means a
newer release wrote the schema, and this one stops rather than misread it.
"""

from __future__ import annotations

from dataclasses import dataclass

from warden.store.errors import StoreSchemaMismatch
from warden.store.pg import Database

TABLE = "warden_schema"
_CREATE = f"""CREATE TABLE IF NOT EXISTS {TABLE} (
    component text PRIMARY KEY,
    version integer NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)"""
_LOCK = 0x77617264  # pg_advisory_xact_lock key of migrations ("ward")


@dataclass(frozen=True, slots=True)
class Schema:
    """One component's tables: script N (from 1) moves the schema from version N-1 to N. Scripts
    are only ever appended; a released one never changes."""

    component: str
    scripts: tuple[str, ...]

    @property
    def latest(self) -> int:
        return len(self.scripts)


def current_version(db: Database, component: str) -> int:
    """The version `component` is at in this database; 0 when it has none yet."""
    with db.connection() as conn:
        exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (TABLE,)).fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute(f"SELECT version FROM {TABLE} WHERE component = %s", (component,)).fetchone()
    return int(row[0]) if row else 0


def migrate(db: Database, schema: Schema) -> tuple[int, int]:
    """Apply the scripts `schema` has and the database lacks; (version before, version after)."""
    with db.transaction() as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        conn.execute(_CREATE)
        row = conn.execute(f"SELECT version FROM {TABLE} WHERE component = %s FOR UPDATE",
                           (schema.component,)).fetchone()
        before = int(row[0]) if row else 0
        if before > schema.latest:
            raise StoreSchemaMismatch(_newer(db, schema, before))
        for version in range(before + 1, schema.latest + 1):
            conn.execute(schema.scripts[version - 1].encode())  # no parameters: several statements may run
        if schema.latest > before:
            conn.execute(
                f"INSERT INTO {TABLE} (component, version) VALUES (%s, %s) "
                "ON CONFLICT (component) DO UPDATE SET version = EXCLUDED.version, applied_at = now()",
                (schema.component, schema.latest),
            )
    return before, schema.latest


def require_current(db: Database, schema: Schema) -> None:
    """At start: StoreSchemaMismatch unless `schema.component` is exactly at the version this
    release knows."""
    version = current_version(db, schema.component)
    if version > schema.latest:
        raise StoreSchemaMismatch(_newer(db, schema, version))
    if version < schema.latest:
        raise StoreSchemaMismatch(
            f"store {db.url.shown}: the {schema.component} schema is at version {version}, this release "
            f"needs {schema.latest}: run `warden store migrate --store ...` first"
        )


def _newer(db: Database, schema: Schema, version: int) -> str:
    return (f"store {db.url.shown}: the {schema.component} schema is at version {version}, newer than "
            f"{schema.latest}, the latest this release knows: upgrade warden (never downgrade a store)")
