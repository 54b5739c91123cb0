"""The catalog store on PostgreSQL (catalog_store.CatalogStore): the catalog and the learnings of a
fleet, in the database every replica shares.

Each table a caller names is kept as `checkpoint_<name>` (a shared database holds other
components' tables too), with one more column, `_inserted`, an identity that gives the order rows
were first written in (SQLite's rowid). The tables of the catalog and the learnings are made by the
schema below (`warden store migrate`): since version 2 the one table shape of catalog_items.py, whose
views the stores above read through. `create_table` makes only tables the schema does not hold.

The lock is the store's promise that an act's check and write hold across every process: a
thread-level lock in the process, and a PostgreSQL advisory lock held by the connection the thread
then reads and writes on. The advisory lock is taken at the first statement under the lock, not at
the lock itself, so a read served from a cache (a pinned version on every Check) never waits for the
other replicas.

Every write to an item or a head (the learnings' or the rest's) moves a counter in
`checkpoint_catalog_changes` in the same transaction, and the counter's change is notified on
CHANNEL: catalog_feed.py follows both, so that an act at one replica is in force at the others.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from checkpoint.policy.catalog_pg_upgrade import ONE_TABLE
from checkpoint.policy.catalog_store import INSERTED, Lock, Not, Pk
from warden.store.errors import StoreUnavailable
from warden.store.migrations import Schema
from warden.store.pg import Database
from warden.store.url import shown

log = logging.getLogger("warden.checkpoint.catalog_store")

PREFIX = "checkpoint_"
ORDER = "_inserted"
CHANGES = "checkpoint_catalog_changes"
CHANNEL = "warden_checkpoint_catalog"
CATALOG, LEARNINGS = "catalog", "learnings"  # the two counters, and the two stores' lock names
# pg_advisory_lock keys, one per store: "warc", "warl"
LOCK_KEYS = {CATALOG: 0x77617263, LEARNINGS: 0x7761726C}
_TYPES = {"text": "text", "integer": "bigint", "float": "double precision"}

_LIFECYCLE = """status text, source text, proposed_by text, proposed_at text, note text, decided_by text,
        decided_at text, decision_note text, proposed_for text"""
_ORDER = f"{ORDER} bigint GENERATED ALWAYS AS IDENTITY"


def _counted(table: str, store: str) -> str:
    return (f"CREATE TRIGGER {table}_changed AFTER INSERT OR UPDATE OR DELETE ON {table} "
            f"FOR EACH ROW EXECUTE FUNCTION {CHANGES}_count('{store}');")


# Released scripts never change; a new version is a new script appended (warden/store/migrations.py).
SCHEMA = Schema("catalog", (
    f"""
    CREATE TABLE checkpoint_agent_versions (
        agent text, version text, snapshot text, first_seen text, policy_revision text, {_ORDER},
        PRIMARY KEY (agent, version));
    CREATE TABLE checkpoint_policy_revisions (
        revision text PRIMARY KEY, files text, first_seen text, {_ORDER});
    CREATE TABLE checkpoint_agent_lifecycle (
        agent text, version text, {_LIFECYCLE}, {_ORDER}, PRIMARY KEY (agent, version));
    CREATE INDEX checkpoint_agent_lifecycle_status ON checkpoint_agent_lifecycle (status);
    CREATE TABLE checkpoint_agent_live (
        agent text PRIMARY KEY, version text, file_version text, {_ORDER});
    CREATE TABLE checkpoint_entry_versions (
        kind text, tenant text, name text, version text, snapshot text, first_seen text, {_ORDER},
        PRIMARY KEY (kind, tenant, name, version));
    CREATE TABLE checkpoint_entry_lifecycle (
        kind text, tenant text, name text, version text, {_LIFECYCLE}, {_ORDER},
        PRIMARY KEY (kind, tenant, name, version));
    CREATE TABLE checkpoint_entry_live (
        kind text, tenant text, name text, version text, file_version text, {_ORDER},
        PRIMARY KEY (kind, tenant, name));
    CREATE TABLE checkpoint_learnings (
        id text NOT NULL PRIMARY KEY, tenant text NOT NULL, agent text, agent_version text, tool text,
        status text NOT NULL, source text, code text, text text, severity text, severity_capped bigint,
        match text, suggested_match text, proposed_by text, proposed_at double precision, reviewed_by text,
        reviewed_at double precision, review_note text, occurrences bigint, last_occurrence_at double precision,
        triggers bigint, last_triggered_at double precision, stale_at double precision, provenance text,
        dedup text, {_ORDER});
    CREATE INDEX checkpoint_learnings_dedup ON checkpoint_learnings (dedup, status);

    -- what is in force moved: one counter per store, in the writing transaction, notified on commit
    CREATE TABLE {CHANGES} (store text PRIMARY KEY, version bigint NOT NULL);
    INSERT INTO {CHANGES} (store, version) VALUES ('{CATALOG}', 0), ('{LEARNINGS}', 0);
    CREATE FUNCTION {CHANGES}_count() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {CHANGES} SET version = version + 1 WHERE store = TG_ARGV[0];
        RETURN NULL;
    END $$;
    CREATE FUNCTION {CHANGES}_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        PERFORM pg_notify('{CHANNEL}', NEW.store);
        RETURN NULL;
    END $$;
    CREATE TRIGGER {CHANGES}_notify AFTER UPDATE ON {CHANGES} FOR EACH ROW EXECUTE FUNCTION {CHANGES}_notify();
    {_counted("checkpoint_agent_lifecycle", CATALOG)}
    {_counted("checkpoint_agent_live", CATALOG)}
    {_counted("checkpoint_entry_lifecycle", CATALOG)}
    {_counted("checkpoint_entry_live", CATALOG)}
    {_counted("checkpoint_learnings", LEARNINGS)}
    """,
    ONE_TABLE,  # version 2: every kind in catalog_items and catalog_heads (catalog_pg_upgrade.py)
))


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _unavailable(exc: BaseException) -> StoreUnavailable:
    """The database down, restarted, or a statement past its timeout: the caller refuses with the
    code. Only the first line: a server's message never carries the password, but a URL might."""
    text = str(exc).strip()
    return StoreUnavailable(f"the catalog store: {shown(text.splitlines()[0]) if text else type(exc).__name__}")


def _pk(pk: Pk) -> tuple[str, ...]:
    return (pk,) if isinstance(pk, str) else pk


class _Held(threading.local):
    """What one thread holds of one store: a connection, while it holds the lock or a transaction."""

    def __init__(self) -> None:
        self.locks = 0  # the lock's depth in this thread
        self.transactions = 0
        self.locked = False  # the advisory lock is taken on `conn`
        self.conn: psycopg.Connection[Any] | None = None
        self.stack: ExitStack | None = None


class PgLock:
    """Reentrant in a thread, exclusive across threads (a threading.RLock) and across processes
    (a PostgreSQL advisory lock, taken by the store at the first statement under it)."""

    def __init__(self, store: PostgresqlStore):
        self._store = store
        self._local = threading.RLock()

    def __enter__(self) -> PgLock:
        self._local.acquire()
        self._store._held.locks += 1
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any, /) -> None:
        held = self._store._held
        try:
            held.locks -= 1
            if held.locks == 0:
                self._store._unlock()
        finally:
            self._local.release()


class PostgresqlStore:
    """The tables of one store (`CATALOG` or `LEARNINGS`) on the shared database `db`."""

    shared = True

    def __init__(self, db: Database, name: str = CATALOG):
        self.read_only = False
        self._db = db
        self._key = LOCK_KEYS[name]
        self._held = _Held()
        self.lock: Lock = PgLock(self)
        self._columns: dict[str, list[str]] = {}  # table -> its columns, `_inserted` left out
        self._columns_lock = threading.Lock()

    # -- connections ---------------------------------------------------------------------------

    def _conn(self) -> psycopg.Connection[Any]:
        """The connection this thread holds (the advisory lock taken on it first when the thread is
        under the lock), or a new one held until the lock and the transactions are left."""
        held = self._held
        if held.conn is None:
            stack = ExitStack()
            try:
                held.conn = stack.enter_context(self._db.connection())
            except BaseException:
                stack.close()
                raise
            held.stack = stack
        if held.locks and not held.locked:
            self._run(held.conn, "SELECT pg_advisory_lock(%s)", (self._key,))
            held.locked = True
        return held.conn

    def _unlock(self) -> None:
        held = self._held
        try:
            if held.locked and held.conn is not None:
                held.locked = False
                try:
                    self._run(held.conn, "SELECT pg_advisory_unlock(%s)", (self._key,))
                except StoreUnavailable as exc:
                    # A session that kept the lock would go back to the pool still holding it, and
                    # every act of the fleet would wait on it: end the session, which frees it. What
                    # the block did is done (or rolled back) already; the caller's answer stands.
                    log.warning("catalog lock not released (%s): closing its connection", exc)
                    held.conn.close()
        finally:
            self._release()

    def _release(self) -> None:
        held = self._held
        if held.locks or held.transactions or held.stack is None:
            return
        stack, held.stack, held.conn, held.locked = held.stack, None, None, False
        stack.close()

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        held = self._held
        if held.conn is not None or held.locks:
            yield self._conn()
            return
        with self._db.connection() as conn:
            yield conn

    @staticmethod
    def _run(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        try:
            return conn.execute(sql.encode(), list(params))
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise _unavailable(exc) from None

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> int:
        with self._connection() as conn:
            return self._run(conn, sql, params).rowcount

    def _select(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        with self._connection() as conn:
            cursor = conn.cursor(row_factory=dict_row)
            try:
                cursor.execute(sql.encode(), list(params))
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                raise _unavailable(exc) from None
            return cursor.fetchall()

    # -- tables ----------------------------------------------------------------------------------

    def _table(self, table: str) -> str:
        return quote(PREFIX + table)

    def columns(self, table: str) -> list[str]:
        """The table's columns in their order ([] when there is no such table); cached once seen."""
        found = self._columns.get(table)
        if found is not None:
            return found
        rows = self._select("SELECT column_name FROM information_schema.columns WHERE table_schema = "
                            "current_schema() AND table_name = %s ORDER BY ordinal_position", (PREFIX + table,))
        names = [r["column_name"] for r in rows if r["column_name"] != ORDER]
        if names:
            with self._columns_lock:
                self._columns[table] = names
        return names

    def create_table(self, table: str, columns: Sequence[str] | Mapping[str, str], pk: Pk, *,
                     not_null: Iterable[str] = (), index: Sequence[str] = ()) -> None:
        if self.has_table(table):
            return
        keys = _pk(pk)
        types = dict(columns) if isinstance(columns, Mapping) else dict.fromkeys(columns, "text")
        required = set(not_null)
        lines = [f"{quote(n)} {_TYPES[t]}{' NOT NULL' if n in required else ''}" for n, t in types.items()]
        lines += [_ORDER, f"PRIMARY KEY ({', '.join(map(quote, keys))})"]
        with self.lock:  # two processes making one table: one at a time
            self._execute(f"CREATE TABLE IF NOT EXISTS {self._table(table)} ({', '.join(lines)})")
            if index:
                self._execute(f"CREATE INDEX IF NOT EXISTS {quote(PREFIX + table + '_' + index[0])} "
                              f"ON {self._table(table)} ({', '.join(map(quote, index))})")
        self._forget(table)

    def add_column(self, table: str, name: str) -> None:
        if name in self.columns(table):
            return
        with self.lock:
            self._execute(f"ALTER TABLE {self._table(table)} ADD COLUMN IF NOT EXISTS {quote(name)} text")
        self._forget(table)

    def _forget(self, table: str) -> None:
        with self._columns_lock:
            self._columns.pop(table, None)

    def has_table(self, table: str) -> bool:
        return bool(self.columns(table))

    # -- rows ------------------------------------------------------------------------------------

    def rows(self, table: str, where: Mapping[str, Any] | None = None, *, order: Sequence[str] = (),
             limit: int | None = None) -> list[dict[str, Any]]:
        clauses, params = [], []
        for column, value in (where or {}).items():
            if isinstance(value, Not):
                clauses.append(f"{quote(column)} <> %s")
                params.append(value.value)
            elif isinstance(value, (list, tuple, set, frozenset)):
                clauses.append(f"{quote(column)} = ANY(%s)")
                params.append(sorted(value) if isinstance(value, (set, frozenset)) else list(value))
            else:
                clauses.append(f"{quote(column)} = %s")
                params.append(value)
        names = self.columns(table)
        if not names:
            raise LookupError(f"no table {table}")
        sql = f"SELECT {', '.join(map(quote, names))} FROM {self._table(table)}"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        if order:
            sql += " ORDER BY " + ", ".join(
                (ORDER if k.lstrip("-") == INSERTED else quote(k.lstrip("-"))) + (" DESC" if k[0] == "-" else "")
                for k in order)
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._select(sql, params)

    def _insert_sql(self, table: str, names: Sequence[str]) -> str:
        return (f"INSERT INTO {self._table(table)} ({', '.join(map(quote, names))}) "
                f"VALUES ({', '.join('%s' for _ in names)})")

    def insert(self, table: str, record: Mapping[str, Any]) -> None:
        self._execute(self._insert_sql(table, list(record)), list(record.values()))

    def insert_ignore(self, table: str, records: Iterable[Mapping[str, Any]]) -> None:
        for record in records:
            self._execute(self._insert_sql(table, list(record)) + " ON CONFLICT DO NOTHING", list(record.values()))

    def upsert(self, table: str, record: Mapping[str, Any], pk: Pk) -> None:
        keys = _pk(pk)
        missing = [k for k in keys if record.get(k) is None]
        if missing:  # a NULL key never conflicts: it would add a row instead of updating one
            raise ValueError(f"upsert into {table} needs a value for {', '.join(missing)}")
        rest = [n for n in record if n not in keys]
        action = ("DO UPDATE SET " + ", ".join(f"{quote(n)} = EXCLUDED.{quote(n)}" for n in rest)) if rest \
            else "DO NOTHING"
        self._execute(self._insert_sql(table, list(record)) + f" ON CONFLICT ({', '.join(map(quote, keys))}) {action}",
                      list(record.values()))

    def update(self, table: str, pk: Pk, values: Sequence[Any], changes: Mapping[str, Any]) -> None:
        keys = _pk(pk)
        sets = ", ".join(f"{quote(n)} = %s" for n in changes)
        where = " AND ".join(f"{quote(k)} = %s" for k in keys)
        done = self._execute(f"UPDATE {self._table(table)} SET {sets} WHERE {where}", [*changes.values(), *values])
        if done != 1:
            raise LookupError(f"{table}: no row {tuple(values)!r} to update")

    def transaction(self) -> AbstractContextManager[Any]:
        return self._transaction()

    @contextmanager
    def _transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """One transaction on the connection this thread holds (a savepoint when nested)."""
        held = self._held
        conn = self._conn()
        held.transactions += 1
        try:
            with conn.transaction():
                yield conn
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            raise _unavailable(exc) from None
        finally:
            held.transactions -= 1
            self._release()

    def close(self) -> None:
        """The pool is the database's, closed with it: nothing of this store's own to close."""
