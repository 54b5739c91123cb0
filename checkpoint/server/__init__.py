"""The checkpoint sidecar: gRPC service, auth, hot reload, metrics around the decision function.

Modules: `service` (decide, sign, record), `grpc_api` (thin handlers), `errors` (the one place
errors become statuses), `auth`, `reload`, `metrics`, `ids`, `convert`, `app` (assembly).
See docs/checkpoint-service.md.
"""

from checkpoint.server.app import CheckpointServer, TlsConfig, create_server, serve
from checkpoint.server.auth import AuthPolicy, load_tokens

__all__ = ["AuthPolicy", "CheckpointServer", "TlsConfig", "create_server", "load_tokens", "serve"]
