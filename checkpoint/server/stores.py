"""The stores a checkpoint opens, chosen by the store setting (--store, WARDEN_STORE, [store] url)."""

from __future__ import annotations

from pathlib import Path

from checkpoint.audit.backends import open_log
from checkpoint.audit.port import DecisionLogStore
from warden.store.url import StoreUrl


def decision_log(store: StoreUrl | None, data: Path, *, synchronous: str = "NORMAL",
                 shared: bool = False) -> DecisionLogStore:
    """The decision log: DATA/decisions.db by default, or the table a fleet shares on PostgreSQL."""
    return open_log(store, data, synchronous=synchronous, shared=shared)
