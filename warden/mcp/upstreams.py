"""The upstream MCP servers the gateway fronts: stdio child processes, one SDK client each, and
streamable HTTP servers (warden/mcp/http_upstream.py).

The client's credential is never passed to an upstream: a child gets only the environment the
settings file gives it (over the SDK's default, which carries no secrets of the gateway's own),
and an HTTP upstream only the token of its own `token_file`.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from warden.mcp.http_upstream import MAX_PAGES, HttpUpstream
from warden.mcp.settings import Upstream

# an SSE event may be this much larger than the largest result the gateway passes on, so that a
# result somewhat too large is refused as such (`result_too_large`); a far larger one is not held
# in memory whole, and fails as the upstream's failure
EVENT_SLACK_BYTES = 64 * 1024


class Upstreams:
    def __init__(self, upstreams: tuple[Upstream, ...], max_result_bytes: int = 1024 * 1024) -> None:
        self._specs = upstreams
        self._max_event_bytes = 2 * max_result_bytes + EVENT_SLACK_BYTES
        self._clients: dict[str, Client] = {}
        self._http: dict[str, HttpUpstream] = {}
        self._last: dict[str, list[types.Tool]] = {}  # each HTTP upstream's last listing it answered
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Upstreams:
        await self._stack.__aenter__()
        for spec in self._specs:
            if spec.url:  # reached at each call: nothing to start, an upstream down now may be up later
                self._http[spec.name] = HttpUpstream(spec, self._max_event_bytes)
                self._stack.push_async_callback(self._http[spec.name].aclose)
                continue
            client = Client(StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env or None),
                            cache=None)  # a cached list is never what the gateway pins or calls by
            try:
                self._clients[spec.name] = await self._stack.enter_async_context(client)
            except Exception as exc:  # noqa: BLE001 - one upstream down: its tools are not shown
                print(f"warden mcp: upstream {spec.name!r} did not start: {exc}", file=sys.stderr)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)

    async def _stdio_tools(self, client: Client) -> list[types.Tool]:
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def listings(self) -> dict[str, list[types.Tool]]:
        """Each upstream's whole tool list, asked now and of all at once, so one slow upstream
        delays a listing by its own timeout only. A stdio upstream that fails lists nothing. An
        HTTP upstream that cannot be reached now lists what it last answered (pinned as ever), so
        that a call of its tools is refused `upstream_unavailable` while it is away, and reaches
        it again once it is back; one never reached lists nothing."""
        out: dict[str, list[types.Tool]] = {}

        async def one(name: str, lister: Any) -> None:
            try:
                out[name] = await lister()
            except Exception as exc:  # noqa: BLE001 - a failing upstream shows no new tools
                print(f"warden mcp: upstream {name!r} did not list its tools: {exc}", file=sys.stderr)
                if name in self._last:
                    out[name] = self._last[name]
                return
            if name in self._http:
                self._last[name] = out[name]

        async with anyio.create_task_group() as group:
            for name, client in self._clients.items():
                group.start_soon(one, name, lambda c=client: self._stdio_tools(c))
            for name, http in self._http.items():
                group.start_soon(one, name, http.list_tools)
        return {name: out[name] for name in sorted(out)}

    async def call(self, upstream: str, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        if upstream in self._http:
            return await self._http[upstream].call(tool, arguments)
        return await self._clients[upstream].call_tool(tool, arguments)
