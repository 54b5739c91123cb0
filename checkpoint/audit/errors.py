"""Errors of the decision log, each with a stable code.

    AuditError                      base; ``.code`` is the stable code a caller denies with
    └── AuditUnavailable            "audit_unavailable": the record was not (known to be) committed
        └── InvalidAuditRecord      the record itself is malformed (a caller bug); also a ValueError

A caller that catches ``AuditUnavailable`` and denies with ``exc.code`` fails closed for every
way a record can fail to reach the log, including its own malformed records.
"""

from __future__ import annotations


class AuditError(Exception):
    code = "audit_error"


class AuditUnavailable(AuditError):
    """The decision could not be recorded: the caller must not act on it."""

    code = "audit_unavailable"


class InvalidAuditRecord(AuditUnavailable, ValueError):
    """A record with an unknown field, a wrong type or a value out of its set."""
