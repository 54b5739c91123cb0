"""Opening the decision log the store setting names: SQLite files in the data folder (one
machine), or the PostgreSQL database a fleet shares (docs/fleet.md, "One decision log")."""

from __future__ import annotations

from pathlib import Path

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.port import DecisionLogReader, DecisionLogStore
from warden.store.errors import StoreError
from warden.store.url import StoreUrl

LOG_FILE = "decisions.db"


def open_pg(store: StoreUrl, *, name: str, max_size: int = 4):  # -> warden.store.pg.Database
    """The store's pool, opened, with the decision log's schema checked to be current."""
    from checkpoint.audit.pg_schema import SCHEMA
    from warden.store.migrations import require_current
    from warden.store.pg import Database

    db = Database(store, name=name, max_size=max_size)
    try:
        db.open()
        require_current(db, SCHEMA)
    except StoreError as exc:
        db.close()
        raise AuditUnavailable(f"decision log: {exc} [{exc.code}]") from None
    return db


def open_log(store: StoreUrl | None, data: str | Path, *, synchronous: str = "NORMAL",
             shared: bool = False) -> DecisionLogStore:
    """The checkpoint's log. AuditUnavailable, with one line saying why, when it cannot be opened."""
    path = Path(data) / LOG_FILE
    if store is not None and store.is_postgresql:
        from checkpoint.audit.pg_log import PgDecisionLog

        # the writer's pool apart from the readers' (WatchDecisions streams, queries, statistics):
        # however many read at once, recording a decision never waits for a connection behind them
        writer = open_pg(store, name="checkpoint-log", max_size=2)
        try:
            readers = open_pg(store, name="checkpoint-log-read", max_size=8)
        except BaseException:
            writer.close()
            raise
        return PgDecisionLog(writer, path=path, read_db=readers, owns_db=True)
    from checkpoint.audit.log import DecisionLog

    file = store.sqlite_file(LOG_FILE) if store is not None else path
    return DecisionLog(file, synchronous=synchronous, shared=shared)  # type: ignore[arg-type]


def open_reader(store: StoreUrl) -> DecisionLogReader:
    """A reader of the PostgreSQL log (the SQLite one is opened by path: checkpoint/audit/cli.py)."""
    from checkpoint.audit.pg_reader import PgDecisionReader

    return PgDecisionReader(open_pg(store, name="audit", max_size=2))


def fleet_head(store: StoreUrl) -> tuple[int, str] | None:
    """The head of the PostgreSQL log, read on a pool opened and closed for this one read: what a
    process that forks (the supervisor of `serve --workers N`) may use, leaving nothing open."""
    from checkpoint.audit.pg_reader import PgDecisionReader

    db = open_pg(store, name="checkpoint-heads", max_size=1)
    try:
        return PgDecisionReader(db).head()
    finally:
        db.close()
