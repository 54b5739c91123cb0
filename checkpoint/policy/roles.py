"""A person's roles in a tenant: the second question after the principal's rights.

A principal says what a credential (a process, or a person's own token) may do at all; a tenant's
roles say which persons may do what inside that tenant. Both must agree. A tenant that declares no
roles leaves its runs to the principals' rights alone (a one-person install), but has no admin:
nobody may approve a change to its agents until one is named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

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


def role_refusal(tenants: Mapping[str, model.Tenant], tenant: str, person: str, role: str) -> str | None:
    """Why `person` may not act as `role` in `tenant`, or None when they may. The reason names
    the person, the role and the tenant (callers record it)."""
    if has_role(tenants.get(tenant), person, role):
        return None
    return f"person {person[:128]!r} is not {_article(role)} {role} of tenant {tenant[:100]!r}"


def roles_by_tenant(tenants: Mapping[str, model.Tenant], person: str) -> dict[str, list[str]]:
    """tenant -> the roles `person` holds there, for every tenant where they hold at least one."""
    held = {name: roles_of(tenant, person) for name, tenant in sorted(tenants.items())}
    return {name: roles for name, roles in held.items() if roles}


def auditor_tenants(tenants: Mapping[str, model.Tenant], person: str, allowed: Iterable[str]) -> list[str]:
    """Of the tenants a principal's audit right lists, those whose records `person` may read:
    where they are an auditor (an admin is one; a tenant without roles leaves it to the principal)."""
    return sorted({t for t in allowed if has_role(tenants.get(t), person, "auditor")})


def _article(role: str) -> str:
    return "an" if role[0] in "aeiou" else "a"
