"""A person's answer to a REQUIRE_APPROVAL decision (Approve, Reject), and the questions a driver
asks before a person acts: their roles (Roles), and the keys that verify the tokens (TokenKeys)."""

from __future__ import annotations

import grpc

from checkpoint.server.servicers.handling import Handling
from warden.checkpoint.v1 import checkpoint_pb2 as pb


def handlers(kit: Handling) -> dict[str, grpc.RpcMethodHandler]:
    service = kit.service
    return {
        "Approve": kit.unary(service.approval_acts.approve, pb.ApproveRequest, pb.ApproveResponse),
        "Reject": kit.unary(service.approval_acts.reject, pb.RejectRequest, pb.RejectResponse),
        "Roles": kit.unary(service.queries.roles, pb.RolesRequest, pb.RolesResponse),
        "TokenKeys": kit.unary(service.queries.token_keys_rpc, pb.TokenKeysRequest, pb.TokenKeysResponse),
    }
