"""The checkpoint's decision log: append-only, hash-chained, in SQLite (see docs/audit.md)."""

from checkpoint.audit.errors import AuditError, AuditUnavailable, InvalidAuditRecord
from checkpoint.audit.log import DecisionLog
from checkpoint.audit.masking import mask_arguments
from checkpoint.audit.reader import DecisionReader
from checkpoint.audit.verify import VerifyReport

__all__ = [
    "AuditError",
    "AuditUnavailable",
    "DecisionLog",
    "DecisionReader",
    "InvalidAuditRecord",
    "VerifyReport",
    "mask_arguments",
]
