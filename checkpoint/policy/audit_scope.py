"""Whose decision records a credential may read: one rule for every reader of the log.

The checkpoint's `WatchDecisions` and the auditor's web view (`warden audit serve`) both ask it,
so a person sees the same records through either. Two questions must agree: the principal's
`audit` right (which tenants its credentials may read at all) and the tenant's roles (which
persons are its auditors; an admin is one, a tenant without roles leaves it to the principal).
"""

from __future__ import annotations

from collections.abc import Mapping

from checkpoint.policy import model
from checkpoint.policy.principals import Principals, caller_name
from checkpoint.policy.roles import auditor_tenants
from warden import codes


class AuditRefused(Exception):
    """The credential may read no record at all; `code` is a stable code (docs/codes.md)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def readable_tenants(principals: Principals, tenants: Mapping[str, model.Tenant], identity: str) -> list[str] | None:
    """The tenants whose records `identity` (`token:NAME`, `mtls:...`, `unix`) may read: None for
    every record, those naming no tenant too; raises AuditRefused when it may read none.

    `audit: ["*"]` is the whole log, a right for a process (a log shipper): the tenants' roles do
    not narrow it, and only it reads records that name no tenant. A principal that lists tenants
    reads, of those, the ones whose roles make the caller (its credential's name) an auditor."""
    principal = principals.of(identity)
    allowed = principal.audit_tenants() if principal is not None else []
    if allowed == []:
        raise AuditRefused(codes.CALLER_NOT_PERMITTED,
                           f"{caller_name(identity)!r} may not read the decision log (audit)")
    if allowed is None:
        return None
    person = caller_name(identity)
    readable = auditor_tenants(tenants, person, allowed)
    if not readable:
        raise AuditRefused(codes.ROLE_REQUIRED,
                           f"person {person[:128]!r} is an auditor of none of the tenants "
                           f"{', '.join(sorted(allowed))} (their principal may read those)")
    return readable
