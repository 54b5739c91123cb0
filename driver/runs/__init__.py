"""The driver's runs: their typed model (model.py), what the driver asks of their state
(store.py, a Protocol) and the SQLite store that keeps them (sqlite.py)."""

from driver.runs.sqlite import SqliteRunStore
from driver.runs.store import RunStore

__all__ = ["RunStore", "SqliteRunStore"]
