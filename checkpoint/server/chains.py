"""Chain tokens: a delegated run's chain of authority, vouched for by the checkpoint.

The engine resolves every agent of `run.actor_chain` from its own catalog, but the chain itself,
with each link's narrowing and budget, comes from the caller. Dropping an ancestor or a narrowing
would widen a child's authority, so when the checkpoint allows a delegation it returns a token:
an HMAC, under a key derived from the grant key, over the chain the child's run will send (the
parent's chain plus the child's link: the agent, the version pinned, the narrowing asked for and
the effective budget the checkpoint granted). Every request whose chain holds two or more agents
must carry the token of exactly that chain; otherwise it is refused with `chain_unverified`. So
whatever the child's own run budget later says (a person's resume, say), its ceilings cannot pass
what the delegation granted: ceilings only narrow down the chain.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from google.protobuf import json_format

from checkpoint.engine.codes import CHAIN_UNVERIFIED
from warden import canonical
from warden.checkpoint.v1 import checkpoint_pb2 as pb

__all__ = ["CHAIN_UNVERIFIED", "chain_problem", "chain_token", "child_chain"]


def _link(actor: pb.Actor) -> dict[str, Any]:
    return {
        "kind": int(actor.kind),
        "id": actor.id,
        "agent_version": actor.agent_version,
        "narrowing": json_format.MessageToDict(actor.narrowing, preserving_proto_field_name=True),
        "budget": json_format.MessageToDict(actor.budget, preserving_proto_field_name=True),
    }


def chain_token(key: bytes, chain: list[pb.Actor]) -> str:
    return hmac.new(key, canonical.dumps([_link(a) for a in chain]), hashlib.sha256).hexdigest()


def child_chain(request: pb.CheckRequest, response: pb.CheckResponse) -> list[pb.Actor]:
    """The chain a child run allowed by `response` will send: the parent's plus the child's link,
    which carries the effective budget granted (not only the one asked for), because the parent's
    own ceilings may live in its run context rather than in its link."""
    child = pb.Actor(
        kind=pb.ACTOR_KIND_AGENT,
        id=request.delegation.agent,
        agent_version=response.child_agent_version,
        narrowing=request.delegation.narrowing,
        budget=response.child_budget,
    )
    return [*request.run.actor_chain, child]


def chain_problem(key: bytes, request: pb.CheckRequest) -> str | None:
    """Why the request's chain is not vouched for, or None (root runs need no token)."""
    chain = list(request.run.actor_chain)
    if sum(1 for a in chain if a.kind == pb.ACTOR_KIND_AGENT) < 2:
        return None
    given = request.run.chain_token
    if not given or not hmac.compare_digest(given, chain_token(key, chain)):
        return "a delegated run must send the chain token the checkpoint returned for its delegation"
    return None
