"""The gateway over streamable HTTP: a request without a token of the gateway's clients file is
refused before the MCP server sees it (401), and each request is decided for its token's client.

Stateless: no decision depends on a transport session, so a client may reconnect, or reach
another replica, and keep its run.
"""

from __future__ import annotations

from typing import Any

import uvicorn
from mcp.server import Server

from warden.mcp.principals import Principals

_REFUSED = b'{"error": "unauthenticated", "error_description": "a bearer token of the gateway\'s clients file"}'


def require_token(app: Any, principals: Principals) -> Any:
    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if not principals.knows(headers.get("authorization", "")):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": _REFUSED})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(server: Server, principals: Principals, address: str) -> None:
    host, _, port = address.rpartition(":")
    app = require_token(server.streamable_http_app(host=host, stateless_http=True), principals)
    await uvicorn.Server(uvicorn.Config(app, host=host, port=int(port), log_level="warning", lifespan="on")).serve()
