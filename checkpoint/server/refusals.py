"""Refusals more than one family of acts gives: a credential that names no principal, and a person
without the role an act needs in the run's tenant."""

from __future__ import annotations

from checkpoint.policy.policyset import PolicySet
from checkpoint.policy.principals import caller_name
from checkpoint.policy.roles import role_refusal
from checkpoint.server.runs import Refused
from warden import codes


def no_principal(caller: str) -> str:
    return f"the credential {caller_name(caller)[:100]!r} names no principal in the policy files"


def require_role(policies: PolicySet, tenant: str, person: str, role: str) -> None:
    """The tenant's roles must agree with the principal's rights: refused `role_required`."""
    refusal = role_refusal(policies.tenants, tenant, person, role)
    if refusal is not None:
        raise Refused(codes.ROLE_REQUIRED, refusal, f"role:{role}")
