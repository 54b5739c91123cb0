"""The checkpoint's decision log: append-only, hash-chained, in a SQLite file or in the PostgreSQL table a
fleet shares, behind one interface (port.py; see docs/audit.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.audit.errors import AuditError, AuditUnavailable, InvalidAuditRecord
    from checkpoint.audit.log import DecisionLog
    from checkpoint.audit.masking import mask_arguments
    from checkpoint.audit.reader import DecisionReader
    from checkpoint.audit.verify import VerifyReport

# Imported on first use, so a command's --help does not load what only its work needs.
_WHERE = {
    "AuditError": "checkpoint.audit.errors",
    "AuditUnavailable": "checkpoint.audit.errors",
    "InvalidAuditRecord": "checkpoint.audit.errors",
    "DecisionLog": "checkpoint.audit.log",
    "mask_arguments": "checkpoint.audit.masking",
    "DecisionReader": "checkpoint.audit.reader",
    "VerifyReport": "checkpoint.audit.verify",
}

__all__ = [
    "AuditError",
    "AuditUnavailable",
    "DecisionLog",
    "DecisionReader",
    "InvalidAuditRecord",
    "VerifyReport",
    "mask_arguments",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
