"""The driver's runs: their typed model (model.py), what the driver asks of their state
(store.py, a Protocol), the SQLite store that keeps them in one file (sqlite.py) and the
PostgreSQL store that several drivers share (postgresql.py, imported where it is opened)."""

from driver.runs.sqlite import SqliteRunStore
from driver.runs.store import RunStore

__all__ = ["RunStore", "SqliteRunStore"]
