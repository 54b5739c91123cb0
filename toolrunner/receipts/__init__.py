"""Receipts: the claim of a decision id before its container starts, the receipt after.

The claim is the single use of a grant at the toolrunner. Where receipts live follows the store
setting (`warden toolrunner serve --store`, docs/fleet.md):

- ``store``: the contract every backend keeps (``Receipts``)
- ``sqlite``: a SQLite file in the data folder, one machine (the default)
- ``postgresql``: the shared store of a fleet; the claim is atomic in the database, so a grant is
  spent once across every toolrunner that holds its key
- ``held``: receipts of calls that ended while the database was away, written when it is back
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from toolrunner.receipts.held import HeldReceipts
from toolrunner.receipts.store import Receipts
from warden.store.url import StoreUrl, sqlite_in

SQLITE_FILE = "toolrunner.db"


@dataclass
class Opened:
    """The receipts a toolrunner serves from, and what to release when it stops."""

    receipts: HeldReceipts
    shown: str  # the store, without its password
    on_close: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        self.receipts.close()
        for release in self.on_close:
            release()


def open_receipts(store: StoreUrl | None, *, data_dir: str | Path, instance: str) -> Opened:
    """The receipts of `instance` on `store` (None: SQLite in `data_dir`). On PostgreSQL the schema
    must be current and the instance name free: warden.store.errors.StoreError otherwise."""
    url = store or sqlite_in(data_dir)
    release: list[Callable[[], None]] = []
    backend: Receipts
    if url.is_postgresql:
        from toolrunner.receipts.postgresql import open_postgresql

        backend, lock = open_postgresql(url, instance=instance)
        release.append(lock.release)
    else:
        from toolrunner.receipts.sqlite import SqliteReceipts

        backend = SqliteReceipts(url.sqlite_file(SQLITE_FILE), instance=instance)
    return Opened(HeldReceipts(backend), url.shown, release)
