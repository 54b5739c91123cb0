"""Principals: who may call the checkpoint, and for what. Built once per policy load.

A caller's credential gives an identity (`token:NAME`, `mtls:SUBJECT`, `unix`); the principal
is the `Principal` document that lists it. Rights are answered here and nowhere else, so every
RPC asks the same questions the same way: may this principal ask decisions for this tenant and
agent, vouch for this person, approve this rule's calls, read the log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

from checkpoint.policy import model


def _any_of(names: Iterable[str], value: str) -> bool:
    return any(n == "*" or n == value for n in names)


@dataclass(frozen=True, slots=True)
class Principal:
    spec: model.Principal

    @property
    def name(self) -> str:
        return self.spec.name

    def may_check(self, tenant: str, agent: str) -> bool:
        """Ask decisions for runs of `agent` (empty: a person acting directly) in `tenant`."""
        rights = self.spec.check
        if rights is None or not _any_of(rights.tenants, tenant):
            return False
        return not agent or _any_of(rights.agents, agent)

    def may_vouch(self, person: str, caller: str) -> bool:
        """Name `person` as the accountable person. `caller` is the credential's own name: a
        principal that vouches for nobody else may name only the person it authenticates as."""
        rights = self.spec.check
        if rights is None or not person:
            return False
        if rights.persons == "any":
            return True
        if rights.persons == "self":
            return person == caller
        return person in rights.persons

    def may_approve(self, tenant: str, agent: str, rule: str, *, own_run: bool) -> bool:
        rights = self.spec.approve
        if rights is None or (own_run and not rights.own_runs):
            return False
        return (
            _any_of(rights.tenants, tenant)
            and _any_of(rights.agents, agent or "")
            and _any_of(rights.rules, rule.removeprefix("rule:"))
        )

    @property
    def acts_as_self(self) -> bool:
        """Its callers vouch only for themselves: each one's runs are its own alone."""
        return self.spec.check is not None and self.spec.check.persons == "self"

    def covers(self, tenant: str) -> bool:
        """Does any of its rights (check, approve, audit) name `tenant`?"""
        spec = self.spec
        return any(rights is not None and _any_of(rights.tenants, tenant)
                   for rights in (spec.check, spec.approve, spec.audit))

    def audit_tenants(self) -> list[str] | None:
        """The tenants whose records it may read: None for every record, [] for none."""
        rights = self.spec.audit
        if rights is None:
            return []
        return None if "*" in rights.tenants else list(rights.tenants)


class Principals:
    """Identity -> principal. An exact identity wins over a pattern; patterns are tried in the
    order of the principals' names, so the answer never depends on file order."""

    __slots__ = ("_exact", "_patterns", "by_name")

    def __init__(self, specs: Iterable[model.Principal] = ()):
        self.by_name: dict[str, Principal] = {}
        self._exact: dict[str, Principal] = {}
        self._patterns: list[tuple[str, Principal]] = []
        for spec in sorted(specs, key=lambda s: s.name):
            principal = Principal(spec)
            self.by_name[spec.name] = principal
            for identity in spec.identities:
                if "*" in identity:
                    self._patterns.append((identity, principal))
                else:
                    self._exact[identity] = principal

    def of(self, identity: str) -> Principal | None:
        found = self._exact.get(identity)
        if found is not None:
            return found
        for pattern, principal in self._patterns:
            if fnmatchcase(identity, pattern):
                return principal
        return None

    def __len__(self) -> int:
        return len(self.by_name)


# The identities whose name is a person's or a service's own name, as tenant roles and `persons:
# self` name them: a person is the same person with a key or an identity token.
NAMED = ("token:", "person:", "service:", "oidc:")


def caller_name(identity: str) -> str:
    """The credential's own name: `token:alice`, `person:alice`, `oidc:alice` -> `alice`; other
    identities (`mtls:...`, `unix`) are their own name."""
    for prefix in NAMED:
        if identity.startswith(prefix):
            return identity[len(prefix):]
    return identity
