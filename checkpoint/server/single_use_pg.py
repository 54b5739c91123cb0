"""Single use across a fleet: the single-use store on the PostgreSQL database every replica shares.

The same two one-way steps as the SQLite store (single_use.py), made atomic by the database: a key
(an approved decision's id, an act id) is taken by an INSERT on a primary key, which succeeds for
exactly one caller of every replica, whatever their concurrency; a run's end is an INSERT that the
first end wins. Whether a run ended is asked on every decision, so it is answered from each
replica's memory of the ends, kept current by LISTEN/NOTIFY and polls (ended_runs_feed.py).

Text PostgreSQL cannot hold (a NUL character, which a caller's act id may carry) is escaped, one
way and reversibly, so that two different keys never meet in one.
"""

from __future__ import annotations

from collections.abc import Sequence

from checkpoint.server.ended_runs_feed import CHANNEL, TABLE, EndedRunsFeed
from warden.store.migrations import Schema
from warden.store.pg import Database

USED = "checkpoint_single_use"

# Released scripts never change; a new version is a new script appended (warden/store/migrations.py).
SCHEMA = Schema("single_use", (
    f"""
    CREATE TABLE {USED} (
        key text PRIMARY KEY,
        used_by text NOT NULL,
        at timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE {TABLE} (
        run_id text PRIMARY KEY,
        how text NOT NULL,
        at timestamptz NOT NULL DEFAULT now(),
        xid xid8 NOT NULL DEFAULT pg_current_xact_id()  -- the polls of ended_runs_feed.py read by it
    );
    CREATE INDEX {TABLE}_xid ON {TABLE} (xid);
    CREATE INDEX {TABLE}_at ON {TABLE} (at);
    CREATE FUNCTION {TABLE}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        -- a notification's payload is at most 8000 bytes; a cut one only delays the end to the next poll
        PERFORM pg_notify('{CHANNEL}', json_build_object(
            'run_id', left(NEW.run_id, 3000), 'how', left(NEW.how, 500), 'at', extract(epoch from NEW.at))::text);
        RETURN NULL;
    END $$;
    CREATE TRIGGER {TABLE}_notify AFTER INSERT ON {TABLE} FOR EACH ROW EXECUTE FUNCTION {TABLE}_notify();
    """,
))


def _text(value: str) -> str:
    """`value` as PostgreSQL text: the backslash and NUL escaped, so that distinct values stay distinct."""
    if "\\" not in value and "\x00" not in value:
        return value
    return value.replace("\\", "\\\\").replace("\x00", "\\0")


class PgSingleUse:
    """SingleUseStore on a shared PostgreSQL database; every failure of the database raises
    StoreUnavailable, which the checkpoint answers with a refusal."""

    def __init__(self, db: Database, feed: EndedRunsFeed) -> None:
        self._db = db
        self._feed = feed

    def start(self) -> PgSingleUse:
        self._feed.start()
        return self

    def claim(self, key: str, used_by: str) -> str | None:
        key = _text(key)
        with self._db.connection() as conn:
            taken = conn.execute(f"INSERT INTO {USED} (key, used_by) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING "
                                 "RETURNING 1", (key, _text(used_by))).fetchone()
            if taken is not None:
                return None
            row = conn.execute(f"SELECT used_by FROM {USED} WHERE key = %s", (key,)).fetchone()
        return row[0] if row else "another decision"

    def release(self, key: str, used_by: str) -> None:
        with self._db.connection() as conn:
            conn.execute(f"DELETE FROM {USED} WHERE key = %s AND used_by = %s", (_text(key), _text(used_by)))

    def used_by(self, key: str) -> str | None:
        with self._db.connection() as conn:
            row = conn.execute(f"SELECT used_by FROM {USED} WHERE key = %s", (_text(key),)).fetchone()
        return row[0] if row else None

    def end_run(self, run_id: str, how: str) -> None:
        run_id, how = _text(run_id), _text(how)
        with self._db.connection() as conn:
            conn.execute(f"INSERT INTO {TABLE} (run_id, how) VALUES (%s, %s) ON CONFLICT (run_id) DO NOTHING",
                         (run_id, how))
        self._feed.note(run_id, how)  # binding here from this answer on, before any notification comes back

    def ended(self, run_ids: Sequence[str]) -> tuple[str, str] | None:
        ids = [_text(r) for r in dict.fromkeys(run_ids) if r]
        if not ids:
            return None
        return self._feed.ended(ids)

    def close(self) -> None:
        self._feed.close()
