"""The gRPC face of the service: the servicer families (checkpoint/server/servicers/) assembled
into one set of method handlers.

Handlers are built rather than taken from the generated `add_..._to_server`, for two reasons:
the request deserializer (the generated one lets a message that does not parse fail inside gRPC
with an opaque INTERNAL, and keeps fields it does not know without a word; ours hands the handler
a marker for both, so the caller gets INVALID_ARGUMENT with the stable code `invalid_request` like
any other bad request, and the refusal is recorded), and the caller's identity, which every
service method takes: the handler authenticates the call once and passes it on. Health and
reflection are separate services, open to probes.

The SIGTERM drain gate (warden/drain.py) is asked first thing in each handler, rather than as a
server interceptor: an interceptor runs on grpcio's one polling thread for every call, and a
server with none skips its interceptor pipeline altogether (tracing's, when configured, still
runs there). The methods are registered with grpcio by name (`method_handlers`), so its C core
matches them without the generic handlers' per-call lookup.
"""

from __future__ import annotations

import grpc

from checkpoint.server.service import CheckpointService
from checkpoint.server.servicers import approvals, audit, catalog, checks, runs
from checkpoint.server.servicers.handling import SERVICE_NAME, Handling, Malformed, Watchers
from warden.auth import AuthPolicy, OnRefused
from warden.drain import Drain

__all__ = ["SERVICE_NAME", "Malformed", "Watchers", "handlers", "method_handlers"]


def handlers(service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, *,
             max_watchers: int = 16, max_check_streams: int = 8, gate: Drain | None = None) -> grpc.GenericRpcHandler:
    """The service as one generic handler (for servers that take no registered methods)."""
    return grpc.method_handlers_generic_handler(
        SERVICE_NAME, method_handlers(service, auth, on_unauthenticated, max_watchers=max_watchers,
                                      max_check_streams=max_check_streams, gate=gate))


def method_handlers(service: CheckpointService, auth: AuthPolicy, on_unauthenticated: OnRefused, *,
                    max_watchers: int = 16, max_check_streams: int = 8,
                    gate: Drain | None = None) -> dict[str, grpc.RpcMethodHandler]:
    """Each method's handler by name. `on_unauthenticated(method, request, context)` records (or
    only counts) a refusal; `gate` counts calls in flight and refuses new ones while draining."""
    kit = Handling(service, auth, on_unauthenticated, gate or Drain())
    return {
        **checks.handlers(kit, max_check_streams=max_check_streams),
        **runs.handlers(kit),
        **approvals.handlers(kit),
        **catalog.handlers(kit),
        **audit.handlers(kit, max_watchers=max_watchers),
    }
