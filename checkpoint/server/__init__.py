"""The checkpoint sidecar: gRPC service, auth, hot reload, metrics around the decision function.

Modules: `service` (decide, sign, record), `grpc_api` (assembles the thin handlers of
`servicers/`, whose `handling` is the one place errors become statuses), `collaborators` (what
every act is handed), `auth`, `reload`, `metrics`, `ids`, `convert`, `app` (assembly).
See docs/checkpoint-service.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from checkpoint.server.app import CheckpointServer, TlsConfig, create_server, serve
    from warden.auth import AuthPolicy, load_tokens

# Imported on first use, so a command's --help does not load what only its work needs.
_WHERE = {
    "CheckpointServer": "checkpoint.server.app",
    "TlsConfig": "checkpoint.server.app",
    "create_server": "checkpoint.server.app",
    "serve": "checkpoint.server.app",
    "AuthPolicy": "warden.auth",
    "load_tokens": "warden.auth",
}

__all__ = [
    "AuthPolicy",
    "CheckpointServer",
    "TlsConfig",
    "create_server",
    "load_tokens",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
