"""The checkpoint's stores, opened from the one store setting (`--store`, docs/fleet.md).

`open_stores` is where a checkpoint turns the setting into the stores it keeps its state in: SQLite
files in a folder (one machine, the default) or the PostgreSQL database a fleet of replicas shares.
On PostgreSQL it requires each store's schema to be the one this release knows, and it opens all
or nothing: a store that cannot open closes those opened before it, so a start that fails leaves no
pool and no thread behind. Each store added here is one more field of `CheckpointStores`.
`decision_log` opens the decision log where the same setting says (it keeps pools of its own, so that
recording a decision never waits behind the other stores' connections).

On PostgreSQL the catalog (agents, skills, templates) and the learnings live in the shared database
too, so an act at any replica is in force at all of them; the `catalog_feed` that keeps each
replica's policy set current with them starts once the policy set is loaded (app.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from checkpoint.audit.backends import open_log
from checkpoint.audit.port import DecisionLogStore
from checkpoint.policy.catalog_store import CatalogStore
from checkpoint.policy.postgresql_store import CATALOG, LEARNINGS, PostgresqlStore
from checkpoint.policy.postgresql_store import SCHEMA as CATALOG_SCHEMA
from checkpoint.server.catalog_feed import CatalogFeed
from checkpoint.server.ended_runs_feed import EndedRunsFeed
from checkpoint.server.limit_store import LIMITS_FILE, LimitStore, SqliteLimits
from checkpoint.server.limit_store_pg import SCHEMA as LIMITS_SCHEMA
from checkpoint.server.limit_store_pg import PgLimits
from checkpoint.server.single_use import SingleUse, SingleUseStore
from checkpoint.server.single_use_pg import SCHEMA as SINGLE_USE_SCHEMA
from checkpoint.server.single_use_pg import PgSingleUse
from warden.store.migrations import require_current
from warden.store.pg import Database
from warden.store.url import StoreUrl, parse_store_url, sqlite_in

SINGLE_USE_FILE = "approvals-used.db"
# seconds an end is remembered beyond the run tokens' lifetime: the clocks of a fleet may differ
HORIZON_MARGIN = 3600.0
# per replica; two of them follow the ended runs and the catalog (LISTEN) for the replica's life
POOL_SIZE = 10


@dataclass
class CheckpointStores:
    """What a checkpoint keeps its state in. `database` is the shared pool (None on SQLite)."""

    url: StoreUrl
    single_use: SingleUseStore
    database: Database | None = None
    # whether what the stores answer is current now (health); SQLite files always are
    current: Callable[[], bool] = lambda: True
    # PostgreSQL: the rows of the catalog and of the learnings, and the feed that follows them
    # (None on SQLite: catalog.db and learnings.db in the data folder)
    catalog: CatalogStore | None = None
    learnings: CatalogStore | None = None
    catalog_feed: CatalogFeed | None = None
    # the counts of the limits across runs (the Instance's `limits`); None only where a test leaves it out
    limits: LimitStore | None = None

    def close(self) -> None:
        try:
            try:
                if self.limits is not None:
                    self.limits.close()
                self.single_use.close()
            finally:  # each follower's thread stops even when another's close failed
                if self.catalog_feed is not None:
                    self.catalog_feed.close()
        finally:
            if self.database is not None:
                self.database.close()


class _AllCurrent:
    """Health's one `store` part from several followers: current when each of them is."""

    def __init__(self, on_current: Callable[[bool], None] | None, parts: tuple[str, ...]):
        self._on_current = on_current
        self._parts = dict.fromkeys(parts, True)

    def part(self, name: str) -> Callable[[bool], None]:
        def told(current: bool) -> None:
            self._parts[name] = current
            if self._on_current is not None:
                self._on_current(all(self._parts.values()))
        return told


def store_url(store: StoreUrl | str | None, data_dir: str | Path) -> StoreUrl:
    """The store a setting names (a URL, or one already parsed); unset: SQLite in the data folder."""
    if isinstance(store, StoreUrl):
        return store
    return parse_store_url(store, default_folder=data_dir) if store else sqlite_in(data_dir)


def open_stores(url: StoreUrl, *, run_token_ttl: float,
                on_current: Callable[[bool], None] | None = None) -> CheckpointStores:
    """Open the checkpoint's stores where `url` says. StoreError (with its code) when a PostgreSQL
    store cannot be reached or its schema is missing, behind or newer than this release knows.
    `on_current`: told when the replica's memory of ended runs stops or starts being current
    (PostgreSQL only; health reports it)."""
    if not url.is_postgresql:
        single = SingleUse(url.sqlite_file(SINGLE_USE_FILE))
        try:
            return CheckpointStores(url, single, limits=SqliteLimits(url.sqlite_file(LIMITS_FILE)))
        except BaseException:
            single.close()
            raise
    db = Database(url, name="checkpoint", max_size=POOL_SIZE).open()
    told = _AllCurrent(on_current, ("ended_runs", "catalog"))
    try:
        require_current(db, SINGLE_USE_SCHEMA)
        require_current(db, CATALOG_SCHEMA)
        require_current(db, LIMITS_SCHEMA)
        feed = EndedRunsFeed(db, horizon=run_token_ttl + HORIZON_MARGIN, on_current=told.part("ended_runs"))
        single_use = PgSingleUse(db, feed).start()
    except BaseException:
        db.close()
        raise
    catalog_feed = CatalogFeed(db, on_current=told.part("catalog"))
    return CheckpointStores(url, single_use, db, current=lambda: feed.current and catalog_feed.current,
                            catalog=PostgresqlStore(db, CATALOG), learnings=PostgresqlStore(db, LEARNINGS),
                            catalog_feed=catalog_feed, limits=PgLimits(db))


def decision_log(url: StoreUrl, data: Path, *, synchronous: str = "NORMAL", shared: bool = False) -> DecisionLogStore:
    """The decision log: DATA/decisions.db on SQLite, or the table every replica appends to on
    PostgreSQL (docs/fleet.md, "One decision log"). AuditUnavailable, in one line, when it cannot open."""
    return open_log(url, data, synchronous=synchronous, shared=shared)
