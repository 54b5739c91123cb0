"""The read-only questions a caller asks the checkpoint: which agent a name resolves to, a
person's roles, the public token keys. Reads of the policy files and keys: nothing is recorded."""

from __future__ import annotations

from checkpoint.engine import InvalidRequest, resolve_agent
from checkpoint.policy.principals import caller_name
from checkpoint.policy.roles import roles_by_tenant
from checkpoint.server.collaborators import PoliciesInForce
from checkpoint.server.refusals import no_principal
from checkpoint.server.runs import MAX_RUN_ID
from warden import codes
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.errors import InvalidArgument, PermissionDenied
from warden.token_keys import KeySet


class ReadOnlyQueries:
    def __init__(self, in_force: PoliciesInForce, token_keys: KeySet):
        self.in_force = in_force
        self.token_keys = token_keys

    def resolve_agent(self, request: pb.ResolveAgentRequest, caller: str) -> pb.ResolveAgentResponse:
        policies = self.in_force.current()
        if not request.agent:
            raise InvalidArgument("invalid_request", "agent is required", "agent")
        try:
            response = resolve_agent(policies, request.agent, request.agent_version)
        except InvalidRequest as exc:
            raise InvalidArgument(exc.code, str(exc.message), exc.field or "agent") from exc
        principal = policies.principals.of(caller)
        if principal is None or not principal.may_check(response.tenant, response.agent):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"{caller_name(caller)!r} may not ask for agent {request.agent[:100]!r}", "agent")
        if not response.policy_revision:
            response.policy_revision = policies.revision
        return response

    def token_keys_rpc(self, request: pb.TokenKeysRequest, caller: str) -> pb.TokenKeysResponse:
        """The public set that verifies run and approval tokens: public by nature, so any caller
        that got past authentication reads it."""
        out = pb.TokenKeysResponse()
        for key in self.token_keys.published():
            out.keys.add(key_id=key.key_id, algorithm="Ed25519", public_key_pem=key.pem, active=key.active)
        return out

    def roles(self, request: pb.RolesRequest, caller: str) -> pb.RolesResponse:
        """A person's roles per tenant, for a caller that may vouch for them (the driver asks
        before each operator action)."""
        policies = self.in_force.current()
        if not request.person or len(request.person) > MAX_RUN_ID:
            raise InvalidArgument(codes.INVALID_REQUEST, f"name the person (1 to {MAX_RUN_ID} characters)", "person")
        principal = policies.principals.of(caller)
        if principal is None:
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED, no_principal(caller))
        if not principal.may_vouch(request.person, caller_name(caller)):
            raise PermissionDenied(codes.CALLER_NOT_PERMITTED,
                                   f"principal {principal.name!r} may not vouch for person {request.person[:100]!r}",
                                   "person")
        out = pb.RolesResponse(person=request.person, policy_revision=policies.revision)
        for tenant, held in roles_by_tenant(policies.tenants, request.person).items():
            out.tenants.add(tenant=tenant, roles=held, roles_declared=policies.tenants[tenant].roles is not None)
        return out
