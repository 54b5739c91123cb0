"""A person's roles in a tenant: the second question after the principal's rights.

A principal says what a credential (a process, or a person's own token) may do at all; a tenant's
roles say which persons may do what inside that tenant. Both must agree. A tenant that declares no
roles leaves its runs to the principals' rights alone (a one-person install), but has no admin:
nobody may approve a change to its agents until one is named.
"""

from __future__ import annotations

from checkpoint.policy import model

ROLES = ("admin", "approver", "operator", "auditor")


def has_role(tenant: model.Tenant | None, person: str, role: str) -> bool:
    """May `person` act as `role` in `tenant`? An admin holds every role; an unknown tenant none."""
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    if tenant is None or not person:
        return False
    if tenant.roles is None:
        return role != "admin"
    return person in tenant.roles.admin or person in getattr(tenant.roles, role)


def roles_of(tenant: model.Tenant | None, person: str) -> list[str]:
    """Every role `person` holds in `tenant`, in ROLES order."""
    return [role for role in ROLES if has_role(tenant, person, role)]
