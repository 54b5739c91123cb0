"""What one credential may be used for: its roles, against the role each RPC needs.

A credential (a key of the key file, an OIDC identity token) names an identity, which the policy's
principals and tenant roles judge as before; its roles only narrow that. A key added with
`--role approver` can approve and read, and nothing else, whatever its principal may do; an OIDC
token is only ever for approvers and auditors. A call the credential's roles do not cover is
refused as unauthenticated, before any other step, and recorded like every such refusal.
"""

from __future__ import annotations

from dataclasses import dataclass

ANY_ROLE = "*"
_SERVICE = "/warden.checkpoint.v1.CheckpointService/"
# Reads every role may make: who holds which role, the keys that verify tokens, the catalog.
_READS = {"Roles", "TokenKeys", "ListAgents", "AgentHistory", "ListCatalogEntries", "CatalogEntryHistory",
          "ListLearnings", "RunSkills", "LoadSkill", "RunLessons", "ResolveAgent"}
_PROPOSALS = {"ProposeAgentChange", "ProposeCatalogEntry", "ProposeLearning"}
_BY_ROLE: dict[str, set[str]] = {
    # asking decisions and running agents: the driver, a gateway, a service in another language
    "check": {"Check", "CheckBatch", "CheckStream", "CheckPlan", "StartRun", "RecordAct", *_PROPOSALS},
    "operator": {"StartRun", "RecordAct", *_PROPOSALS},
    "approver": {"Approve", "Reject"},
    "auditor": {"WatchDecisions", "AgentStats", "audit-page"},
    "admin": {"ReviewAgentChange", "RetireAgentVersion", "ReviewCatalogEntry", "RetireCatalogEntry",
              "ReviewLearning"},
}
# The audit page is no RPC: its readers are asked for the same role under this name.
AUDIT_PAGE = "audit-page"


def permits(roles: tuple[str, ...], method: str) -> bool:
    """May a credential holding `roles` make the call `method` (a gRPC method path, or
    AUDIT_PAGE)? `*` is every role; an admin holds every role. An unknown method: no."""
    if ANY_ROLE in roles or "admin" in roles:
        return True
    name = method.removeprefix(_SERVICE)
    if name in _READS:
        return bool(roles)
    return any(name in _BY_ROLE.get(role, ()) for role in roles)


@dataclass(frozen=True)
class Credential:
    """An authenticated caller: its identity (`person:bob`, `oidc:carol`, `token:driver`) and
    the roles its credential was given."""

    identity: str
    roles: tuple[str, ...] = (ANY_ROLE,)

    def may(self, method: str) -> bool:
        return permits(self.roles, method)
