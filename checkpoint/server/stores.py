"""The checkpoint's stores, opened from the one store setting (`--store`, docs/fleet.md).

`open_stores` is where a checkpoint turns the setting into the stores it keeps its state in: SQLite
files in a folder (one machine, the default) or the PostgreSQL database a fleet of replicas shares.
On PostgreSQL it requires each store's schema to be the one this release knows, and it opens all
or nothing: a store that cannot open closes those opened before it, so a start that fails leaves no
pool and no thread behind. Each store added here is one more field of `CheckpointStores`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from checkpoint.server.ended_runs_feed import EndedRunsFeed
from checkpoint.server.single_use import SingleUse, SingleUseStore
from checkpoint.server.single_use_pg import SCHEMA as SINGLE_USE_SCHEMA
from checkpoint.server.single_use_pg import PgSingleUse
from warden.store.migrations import require_current
from warden.store.pg import Database
from warden.store.url import StoreUrl, parse_store_url, sqlite_in

SINGLE_USE_FILE = "approvals-used.db"
# seconds an end is remembered beyond the run tokens' lifetime: the clocks of a fleet may differ
HORIZON_MARGIN = 3600.0
POOL_SIZE = 8  # per replica; one of them follows the ended runs (LISTEN) for the replica's life


@dataclass
class CheckpointStores:
    """What a checkpoint keeps its state in. `database` is the shared pool (None on SQLite)."""

    url: StoreUrl
    single_use: SingleUseStore
    database: Database | None = None
    # whether what the stores answer is current now (health); SQLite files always are
    current: Callable[[], bool] = lambda: True

    def close(self) -> None:
        try:
            self.single_use.close()
        finally:
            if self.database is not None:
                self.database.close()


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
        return CheckpointStores(url, SingleUse(url.sqlite_file(SINGLE_USE_FILE)))
    db = Database(url, name="checkpoint", max_size=POOL_SIZE).open()
    try:
        require_current(db, SINGLE_USE_SCHEMA)
        feed = EndedRunsFeed(db, horizon=run_token_ttl + HORIZON_MARGIN, on_current=on_current)
        single_use = PgSingleUse(db, feed).start()
    except BaseException:
        db.close()
        raise
    return CheckpointStores(url, single_use, db, current=lambda: feed.current)
