"""Who may do what on the operator API: the person's roles in the run's tenant, from the checkpoint.

The operators file says who is calling (a person); the checkpoint, which owns the policy, says
what that person may do in each tenant (its `Roles` RPC; checkpoint/policy/roles.py). Every
DriverService RPC asks once, then:

- reading a run (GetRun, WatchRun, ListRuns) needs any role in its tenant. A run of a tenant where
  the person holds none is answered exactly like a run that does not exist (`run_not_found`), so
  its existence does not leak across tenants; ListRuns lists only runs of the person's tenants;
- acting on a run needs the role RPC_ROLES names (`role_required`, PERMISSION_DENIED, when the
  person has another role there; `run_not_found` / `approval_not_found` when they have none).

StartRun is the exception: the run's tenant is the agent's, which only the checkpoint's StartRun
resolves, and that decision checks `operator` itself (a recorded DENY `role_required` the driver
passes on), so it needs no second call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from driver.errors import RoleRequired, RunStateError

ANY = "any"  # any role in the tenant: a reader's right

# The role each DriverService RPC needs in the tenant of the run it names. A contract test keeps
# this table complete: an RPC added to driver.proto without an entry fails it.
RPC_ROLES: dict[str, str] = {
    "StartRun": "operator",  # the checkpoint's StartRun decides it (see above)
    "GetRun": ANY,
    "ListRuns": ANY,
    "WatchRun": ANY,
    "ApproveCall": "approver",
    "RejectCall": "approver",
    "ResumeRun": "operator",
    "CancelRun": "operator",
    "AmendGoal": "operator",
    "PauseRun": "operator",
}


def not_found(what: str, key: str) -> RunStateError:
    """The store's own answer for a missing row (RunStore._get): a run or approval the person may
    not see gets exactly this, never a hint that it exists."""
    return RunStateError(f"no {what} {key!r}", code=f"{what}_not_found")


@dataclass(frozen=True)
class PersonRoles:
    person: str
    by_tenant: Mapping[str, frozenset[str]]

    def holds(self, tenant: str, role: str) -> bool:
        held = self.by_tenant.get(tenant, frozenset())
        return bool(held) if role == ANY else role in held

    def tenants(self) -> list[str]:
        """The tenants where the person holds any role."""
        return sorted(t for t, held in self.by_tenant.items() if held)

    def require(self, rpc: str, tenant: str, *, what: str, key: str) -> None:
        """`rpc` on the run (or approval) `key` of `tenant`: not found without any role there,
        `role_required` without the one RPC_ROLES names."""
        role = RPC_ROLES[rpc]
        if not self.holds(tenant, ANY):
            raise not_found(what, key)
        if not self.holds(tenant, role):
            raise RoleRequired(f"{rpc}: person {self.person!r} is not {'an' if role[0] in 'aeiou' else 'a'} "
                               f"{role} of tenant {tenant!r}")
