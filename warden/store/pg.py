"""One PostgreSQL store: a bounded pool of connections, each with a statement timeout.

Every way the database can fail a caller (down, restarting, slower than the statement timeout, every
connection busy) becomes StoreUnavailable with the code `store_unavailable`, so that callers refuse
with a code instead of hanging or answering without their record. Nothing here retries: the caller
refuses, and the next call finds the database again by itself when it is back (broken connections
are dropped from the pool as soon as one of them fails).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from warden.store.errors import StoreUnavailable
from warden.store.url import StoreUrl, shown

log = logging.getLogger("warden.store")

STATEMENT_TIMEOUT = 5.0  # seconds: a statement slower than this is cancelled, and the call refused
POOL_TIMEOUT = 2.0  # seconds a caller waits for a free connection before it is refused
CONNECT_TIMEOUT = 5  # seconds (libpq takes whole seconds)
# seconds the pool keeps retrying a lost connection by itself. Its retries back off (1, 2, 4, ...
# seconds), so a long outage would leave it asleep well after the database is back; giving up soon
# instead means the next caller's request starts a fresh attempt at once (measured: back 17 s after
# a 40 s outage with the default of 5 minutes)
RECONNECT_TIMEOUT = 3.0


def _first_line(exc: BaseException) -> str:
    text = shown(str(exc).strip()) or type(exc).__name__
    return text.splitlines()[0]


class Database:
    """A pool of connections to the PostgreSQL store `url` names, for the process called `name`."""

    def __init__(self, url: StoreUrl, *, name: str, max_size: int = 8, statement_timeout: float = STATEMENT_TIMEOUT,
                 pool_timeout: float = POOL_TIMEOUT, connect_timeout: int = CONNECT_TIMEOUT,
                 read_only: bool = False) -> None:
        if not url.is_postgresql:
            raise ValueError(f"{url.shown} is not a PostgreSQL store")
        self.url = url
        self.name = name
        self._kwargs: dict[str, Any] = {
            "autocommit": True,  # each store opens the transactions it needs, and no others
            "application_name": f"warden-{name}",
            "connect_timeout": connect_timeout,
            # read_only: every transaction of the pool is, so a command that only reads (a one-off
            # `warden check`) cannot change the fleet's store whatever a code path below it tries
            "options": f"-c statement_timeout={int(statement_timeout * 1000)}"
                       + (" -c default_transaction_read_only=on" if read_only else ""),
            # a link that dies without a reset (a node or a firewall gone) is noticed within ~11 s
            # instead of the kernel's two hours, so a pooled connection cannot hang a caller
            "keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
        }
        if url.password is not None:
            self._kwargs["password"] = url.password
        self._pool = ConnectionPool(url.conninfo, kwargs=self._kwargs, min_size=1, max_size=max_size,
                                    timeout=pool_timeout, open=False, name=f"warden-{name}",
                                    reconnect_timeout=RECONNECT_TIMEOUT)

    def open(self) -> Database:
        """Connect once, so that a wrong host, password or database stops the start with one line;
        then open the pool. StoreUnavailable when the database cannot be reached."""
        try:
            with psycopg.connect(self.url.conninfo, **self._kwargs):
                pass
        except psycopg.Error as exc:
            raise StoreUnavailable(f"store {self.url.shown}: {_first_line(exc)}") from None
        self._pool.open(wait=False)
        return self

    def close(self) -> None:
        self._pool.close()

    def connect_alone(self) -> psycopg.Connection[Any]:
        """A connection of its own, outside the pool, with the pool's settings: for a session-level
        lock that must go when this connection does. StoreUnavailable when it cannot be made."""
        try:
            return psycopg.connect(self.url.conninfo, **self._kwargs)
        except psycopg.Error as exc:
            raise StoreUnavailable(f"store {self.url.shown}: {_first_line(exc)}") from None

    def __enter__(self) -> Database:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection from the pool, in autocommit; the database's failures as StoreUnavailable."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise StoreUnavailable(
                f"store {self.url.shown}: no free connection within {self._pool.timeout:g}s "
                f"(all {self._pool.max_size} busy, or the database unreachable)"
            ) from None
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._drop_broken()
            raise StoreUnavailable(f"store {self.url.shown}: {_first_line(exc)}") from None

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A connection inside one transaction: committed when the block ends, rolled back on error."""
        with self.connection() as conn, conn.transaction():
            yield conn

    def ping(self) -> bool:
        """Whether the database answers now (health checks)."""
        try:
            with self.connection() as conn:
                conn.execute("SELECT 1")
            return True
        except StoreUnavailable:
            return False

    def _drop_broken(self) -> None:
        # after a restart every idle connection is dead: test them now, so the next caller gets a
        # fresh one instead of failing once per pooled connection
        try:
            self._pool.check()
        except Exception:  # noqa: BLE001 - a check that fails changes nothing; the caller already refuses
            log.debug("store %s: pool check failed", self.url.shown, exc_info=True)
