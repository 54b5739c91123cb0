"""Runs the checkpoint established: issuing run tokens, and putting a request's run back on them.

A request's run context (tenant, run ids, mode, actor chain, inputs) is not believed: it is taken
from the run token the request presents, which the checkpoint signed when the run started or
when a delegation was allowed (see `tokens`). Fields the request fills in anyway must equal the
token's. What stays the caller's: `has_plan` and the run's `budget` (the driver is trusted for
the counters and the person's budget it reports; a child's granted budget is in its chain link,
which is signed, and ceilings only narrow down the chain).
"""

from __future__ import annotations

import base64
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError

from checkpoint.audit.record import CanonicalJson, json_column
from checkpoint.server import convert
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.codes import RUN_TOKEN_EXPIRED, RUN_TOKEN_INVALID
from warden.token_keys import KeySet
from warden.tokens import (
    RUN_LABEL,
    RUN_TOKEN_TTL_SECONDS,
    Signer,
    TokenExpired,
    TokenInvalid,
    key_id_of,
)

_MEMO_SIZE = 4096
_MEMO_TOKEN_BYTES = 2048  # larger tokens (big inputs) are verified each time, so the memo stays small
MAX_RUN_ID = 128


class Refused(Exception):
    """A request the service answers with a recorded DENY before (or instead of) deciding."""

    def __init__(self, code: str, reason: str, rule: str):
        super().__init__(reason)
        self.code, self.reason, self.rule = code, reason, rule


def _actor_claim(actor: pb.Actor) -> str:
    # the link's exact wire bytes (deterministic): parsed back in a microsecond, where a JSON form
    # through json_format costs a hundred times that on a run's first check
    return base64.urlsafe_b64encode(actor.SerializeToString(deterministic=True)).decode("ascii")


def _actor(claim: str) -> pb.Actor:
    return pb.Actor.FromString(base64.urlsafe_b64decode(claim))


class Established:
    """What a verified run token says: the run context to decide under, whom it was issued to, the
    policy revision in force when the run began (it bounds the run: see `pins`), and the skill
    versions it may load (docs/skills.md)."""

    __slots__ = ("run", "principal", "caller", "revision", "skills", "_logged_chain", "key_id", "expires")

    def __init__(self, run: pb.RunContext, principal: str, caller: str, revision: str,
                 skills: Mapping[str, str] | None = None, key_id: str = "", expires: float = math.inf):
        self.run = run
        self.key_id = key_id  # the key that signed the token: a memoised run is refused once it is retired
        self.expires = expires  # Unix seconds: from then on the token is refused
        self.principal = principal
        self.caller = caller  # "" for any credential of the principal; else the one identity
        self.revision = revision
        self.skills: dict[str, str] = dict(skills or {})  # skill name -> the version the run pinned
        self._logged_chain: tuple[list[dict[str, Any]], CanonicalJson] | None = None

    def logged_chain(self) -> tuple[list[dict[str, Any]], CanonicalJson]:
        """The run's actor chain as every record of the run keeps it, and its column text: made once
        per run token (established runs are memoised), not once per call. Callers must not edit it."""
        if self._logged_chain is None:
            chain = convert.actor_chain(self.run.actor_chain)
            self._logged_chain = (chain, json_column("actor_chain", chain))
        return self._logged_chain

    @property
    def agent(self) -> str:
        chain = self.run.actor_chain
        return chain[-1].id if len(chain) > 1 else ""


class RunTokens:
    def __init__(self, keys: KeySet, ttl_seconds: float = RUN_TOKEN_TTL_SECONDS,
                 clock: Callable[[], float] = time.time):
        self._signer = Signer(keys, RUN_LABEL, ttl_seconds, clock)
        self._memo: OrderedDict[str, Established] = OrderedDict()
        self._lock = threading.Lock()

    def issue(self, run: pb.RunContext, principal: str, revision: str, caller: str = "",
              skills: Mapping[str, str] | None = None) -> str:
        """Sign `run` (its identity fields, chain and inputs) for `principal` (and, when given, only
        the credential `caller`), pinned to the policy `revision` in force and to the `skills`
        versions it may load (name -> version); sets run.run_token."""
        claims: dict[str, object] = {
            "run_id": run.run_id,
            "root_run_id": run.root_run_id,
            "parent_run_id": run.parent_run_id,
            "tenant": run.tenant,
            "mode": int(run.mode),
            "chain": [_actor_claim(a) for a in run.actor_chain],
            "inputs": json_format.MessageToDict(run.inputs) if run.HasField("inputs") else None,
            "principal": principal,
            "caller": caller,
            "revision": revision,
        }
        if skills:  # only when there are any: a token of a run without skills reads as before
            claims["skills"] = {str(k): str(v) for k, v in skills.items()}
        run.run_token = self._signer.sign(claims)
        return run.run_token

    def renew(self, token: str) -> str:
        """`token` (one that verifies now) signed again with a new lifetime and nothing else changed."""
        claims = self._signer.verify(token)
        return self._signer.sign({k: v for k, v in claims.items() if k not in ("iat", "exp")})

    def _verified(self, token: str, at: float | None) -> Established:
        with self._lock:
            found = self._memo.get(token)
            if found is not None:
                self._memo.move_to_end(token)
        if found is not None:
            # remembered, not believed for ever: its lifetime and its key are asked on every call
            if (self._signer.clock() if at is None else at) >= found.expires:
                raise Refused(RUN_TOKEN_EXPIRED, "the run token expired: start the run again", "run_token")
            if self._signer.keys.public_key(found.key_id) is None:
                raise Refused(RUN_TOKEN_INVALID, f"the run token is not valid: signed with key {found.key_id!r}, "
                              "which is not in the published set", "run_token")
            return found
        try:
            claims = self._signer.verify(token, at)
            run = pb.RunContext(
                run_token=token,
                run_id=claims["run_id"],
                root_run_id=claims["root_run_id"],
                parent_run_id=claims["parent_run_id"],
                tenant=claims["tenant"],
                mode=claims["mode"],
                actor_chain=[_actor(a) for a in claims["chain"]],
            )
            if claims["inputs"] is not None:
                run.inputs.update(claims["inputs"])
            skills = claims.get("skills") or {}
            if not isinstance(skills, dict):
                raise TypeError("skills")
            established = Established(run, str(claims["principal"]), str(claims["caller"]), str(claims["revision"]),
                                      {str(k): str(v) for k, v in skills.items()}, key_id_of(token),
                                      float(claims["exp"]))
        except TokenExpired as exc:
            raise Refused(RUN_TOKEN_EXPIRED, f"{exc}: start the run again", "run_token") from None
        except TokenInvalid as exc:
            raise Refused(RUN_TOKEN_INVALID, f"the run token is not valid: {exc}", "run_token") from None
        except (KeyError, TypeError, ValueError, json_format.ParseError, DecodeError):
            raise Refused(RUN_TOKEN_INVALID, "the run token's claims are not well formed", "run_token") from None
        if len(token) <= _MEMO_TOKEN_BYTES:
            with self._lock:
                self._memo[token] = established
                if len(self._memo) > _MEMO_SIZE:
                    self._memo.popitem(last=False)
        return established

    def establish(self, request: pb.CheckRequest, at: float | None = None) -> Established:
        """Replace the request's run context by its token's (in place) and return what was established;
        `at`: the moment the token must be alive at (default: now), the decision's own."""
        given = request.run
        if not given.run_token:
            raise Refused(
                RUN_TOKEN_INVALID, "every check presents the run token StartRun or a delegation returned", "run_token"
            )
        established = self._verified(given.run_token, at)
        signed = established.run
        for name in ("tenant", "run_id", "root_run_id", "parent_run_id"):
            value = getattr(given, name)
            if value and value != getattr(signed, name):
                raise Refused(RUN_TOKEN_INVALID, f"run.{name} is not the run token's", "run_token")
        if given.mode and given.mode != signed.mode:
            raise Refused(RUN_TOKEN_INVALID, "run.mode is not the run token's", "run_token")
        if len(given.actor_chain) and list(given.actor_chain) != list(signed.actor_chain):
            raise Refused(RUN_TOKEN_INVALID, "run.actor_chain is not the run token's", "run_token")
        if given.HasField("inputs") and given.inputs != signed.inputs:
            raise Refused(RUN_TOKEN_INVALID, "run.inputs are not the run token's", "run_token")
        has_plan = given.has_plan
        budget = pb.Budget()
        budget.CopyFrom(given.budget)
        had_budget = given.HasField("budget")
        given.CopyFrom(signed)
        given.has_plan = has_plan
        if had_budget:
            given.budget.CopyFrom(budget)
        return established


def child_run(parent: pb.RunContext, request: pb.CheckRequest, response: pb.CheckResponse, run_id: str,
              tenant: str) -> pb.RunContext:
    """The run an allowed delegation starts: the parent's chain plus the child's link, which carries
    the narrowing asked for and the effective budget granted (the parent's own ceilings may live in
    its run context rather than its link, so the granted one is what binds the child)."""
    child = pb.Actor(
        kind=pb.ACTOR_KIND_AGENT,
        id=request.delegation.agent,
        agent_version=response.child_agent_version,
        run_id=run_id,
        narrowing=request.delegation.narrowing,
        budget=response.child_budget,
    )
    run = pb.RunContext(
        run_id=run_id,
        root_run_id=parent.root_run_id or parent.run_id,
        parent_run_id=parent.run_id,
        tenant=tenant,
        mode=parent.mode,
        actor_chain=[*parent.actor_chain, child],
    )
    if parent.HasField("inputs"):
        run.inputs.CopyFrom(parent.inputs)
    return run
