"""A streamable HTTP upstream: an MCP server the gateway reaches at a URL, with the SDK's client.

Each listing and each call is one connection of its own, made in the task that needs it, held to
the upstream's `timeout`: an upstream that went down and came back is reached again at the next
call, with nothing to reconnect and no session of the SDK's to outlive it. The HTTP connections
themselves are pooled by one httpx client per upstream.

The only credential an upstream sees is the bearer token of its `token_file`, read at each request
(a rotated token is used without a restart; an unreadable one fails the call rather than sending
none). Nothing of the gateway's own clients' requests, their token least of all, is passed on.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from warden.mcp.settings import Upstream

MAX_PAGES = 100  # an upstream that pages forever cannot hang a listing


class UpstreamUnreachable(Exception):
    """The upstream could not be reached, timed out, or broke the protocol: one plain reason."""


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the task groups of the SDK and httpx."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class _TokenFile(httpx2.Auth):
    """`Authorization: Bearer` with the token file's content, read for each request."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        from warden.datafolder import read_credential

        if self.upstream.token_file is not None:
            token = read_credential(self.upstream.token_file)
            if not token:
                raise OSError(f"upstream {self.upstream.name!r}: its token file {self.upstream.token_file} is empty")
            request.headers["Authorization"] = f"Bearer {token}"
        else:
            request.headers.pop("Authorization", None)
        yield request


class HttpUpstream:
    def __init__(self, spec: Upstream, max_event_bytes: int) -> None:
        self.spec = spec
        # an answer as an SSE event is bounded in memory; a larger one fails as the upstream's failure
        self._max_event_bytes = max_event_bytes
        self._discovered: tuple[str, types.DiscoverResult] | None = None
        self._http = httpx2.AsyncClient(auth=_TokenFile(spec), timeout=httpx2.Timeout(spec.timeout),
                                        follow_redirects=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    @asynccontextmanager
    async def _connected(self) -> Any:
        transport = streamable_http_client(self.spec.url, http_client=self._http,
                                           max_sse_event_size=self._max_event_bytes)
        # A server of the stateless protocol era answered `server/discover` once: later connections
        # adopt that answer instead of asking again (a round trip less per call). Any failure
        # forgets it, so an upstream that restarted with other versions is asked afresh next time.
        known = self._discovered
        mode: Any = known[0] if known else "auto"
        client = Client(transport, cache=None,  # a cached list is never what the gateway pins or calls by
                        read_timeout_seconds=self.spec.timeout, mode=mode, prior_discover=known[1] if known else None)
        try:
            async with client:
                if known is None and client.session.discover_result is not None:
                    self._discovered = (client.protocol_version, client.session.discover_result)
                yield client
        except BaseException:
            self._discovered = None
            raise

    async def list_tools(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        try:
            with anyio.fail_after(self.spec.timeout):
                async with self._connected() as client:
                    cursor: str | None = None
                    for _ in range(MAX_PAGES):
                        page = await client.list_tools(cursor=cursor)
                        tools.extend(page.tools)
                        cursor = page.next_cursor
                        if not cursor:
                            break
        except Exception as exc:  # noqa: BLE001 - whatever failed, the upstream lists nothing
            raise self._unreachable(exc) from None
        return tools

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        try:
            with anyio.fail_after(self.spec.timeout):
                async with self._connected() as client:
                    return await client.call_tool(tool, arguments)
        except Exception as exc:  # noqa: BLE001 - the caller refuses with `upstream_unavailable`
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: BaseException) -> UpstreamUnreachable:
        leaf = _leaf(exc)
        if isinstance(leaf, TimeoutError):
            return UpstreamUnreachable(f"no answer within {self.spec.timeout:g}s")
        return UpstreamUnreachable(f"{type(leaf).__name__}: {leaf}"[:300])
