"""The agent versions one request names, read from the catalog before the decision function runs.

decide() is pure: it reads no file and no database. A run pins its agents' versions, and a pinned
version may be one the policy files no longer define (superseded, or a version named by id): only
the catalog holds it. So the server loads the versions a request names (every agent of its chain,
and the child a delegation names) into a `PinnedVersions` first, and hands that to decide().
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from warden.checkpoint.v1 import checkpoint_pb2 as pb

if TYPE_CHECKING:
    from checkpoint.policy.policyset import AgentVersion, PolicySet


@dataclass(frozen=True, slots=True)
class PinnedVersions:
    """What the catalog said about the versions one request names, held in memory."""

    # (agent, version) -> the version, for each pair the request names that the catalog holds
    found: Mapping[tuple[str, str], AgentVersion] = field(default_factory=dict)
    # the agents named that the catalog holds some version of (an unknown version of a known
    # agent is refused with its own code)
    catalogued: frozenset[str] = frozenset()

    def version(self, policies: PolicySet, name: str, version: str) -> AgentVersion | None:
        """`name`@`version` as PolicySet.agent_version finds it, from memory only."""
        if policies.enforce_shadow and name in policies.shadow_agents and (name, version) not in policies.retired:
            # the question the shadow answers: what if the candidate were this agent, whatever
            # version the run pinned
            return policies.shadow_agents[name]
        current = policies.agents.get(name)
        if current is not None and current.version == version:
            return current
        return self.found.get((name, version))

    def known(self, policies: PolicySet, name: str) -> bool:
        """Does the policy set or the catalog know an agent of this name?"""
        return name in policies.agents or name in self.catalogued


NOTHING = PinnedVersions()  # only the versions the policy set itself holds


def named(request: pb.CheckRequest) -> Iterator[tuple[str, str]]:
    """The (agent, version) pairs a request names: its chain's agents, and a delegation's child."""
    if request.HasField("run"):
        for actor in request.run.actor_chain[1:]:
            if actor.kind == pb.ACTOR_KIND_AGENT and actor.id and actor.agent_version:
                yield actor.id, actor.agent_version
    if request.WhichOneof("action") == "delegation" and request.delegation.agent_version:
        yield request.delegation.agent, request.delegation.agent_version


def load(policies: PolicySet, request: pb.CheckRequest) -> PinnedVersions:
    """Read from the catalog every version the request names (the I/O decide() never does).
    The set's shadow agents are not consulted here: `version()` puts them first itself."""
    found: dict[tuple[str, str], AgentVersion] = {}
    catalogued: set[str] = set()
    for name, version in named(request):
        current = policies.agents.get(name)
        hit = current if current is not None and current.version == version else policies.catalog.get(name, version)
        if hit is not None:
            found[(name, version)] = hit
        elif name not in policies.agents and policies.catalog.versions(name):
            catalogued.add(name)
    return PinnedVersions(found, frozenset(catalogued))
