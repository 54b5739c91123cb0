"""Who a request to the gateway is decided for: the stdio launcher's configured identity, or an
HTTP client's bearer token from the gateway's own token file. Never the client's `clientInfo`,
never a transport session."""

from __future__ import annotations

from typing import Any

from warden.auth import bearer_identity
from warden.mcp.settings import Client, Settings


class Principals:
    def __init__(self, settings: Settings, tokens: dict[bytes, str] | None = None, *, http: bool = False) -> None:
        # over HTTP every request names its client by token: none falls back to the launcher's identity
        launcher = settings.person and not http
        self._stdio = Client("stdio", settings.person, settings.agent, settings.tenant) if launcher else None
        self._tokens = tokens or {}
        self._clients = {c.name: c for c in settings.clients}

    def of(self, ctx: Any) -> Client | None:
        """The principal of one request; None when it has no credential the gateway knows."""
        request = getattr(ctx, "request", None)
        if request is None or not hasattr(request, "headers"):
            return self._stdio  # stdio: the person who launched the gateway
        identity = bearer_identity(self._tokens, request.headers.get("authorization", ""))
        return self._clients.get(identity.removeprefix("token:")) if identity else None

    def knows(self, header: str) -> bool:
        identity = bearer_identity(self._tokens, header)
        return identity is not None and identity.removeprefix("token:") in self._clients
