"""The upstream MCP servers the gateway fronts: stdio child processes, one SDK client each.

The client's credential is never passed to an upstream: a child gets only the environment the
settings file gives it (over the SDK's default, which carries no secrets of the gateway's own).
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from typing import Any

import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from warden.mcp.settings import Upstream

MAX_PAGES = 100  # an upstream that pages forever cannot hang a listing


class Upstreams:
    def __init__(self, upstreams: tuple[Upstream, ...]) -> None:
        self._specs = upstreams
        self._clients: dict[str, Client] = {}
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Upstreams:
        await self._stack.__aenter__()
        for spec in self._specs:
            client = Client(StdioServerParameters(command=spec.command, args=list(spec.args), env=spec.env or None),
                            cache=None)  # a cached list is never what the gateway pins or calls by
            try:
                self._clients[spec.name] = await self._stack.enter_async_context(client)
            except Exception as exc:  # noqa: BLE001 - one upstream down: its tools are not shown
                print(f"warden mcp: upstream {spec.name!r} did not start: {exc}", file=sys.stderr)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)

    async def listings(self) -> dict[str, list[types.Tool]]:
        """Each upstream's whole tool list, asked now (an upstream that fails lists nothing)."""
        out: dict[str, list[types.Tool]] = {}
        for name, client in self._clients.items():
            tools: list[types.Tool] = []
            cursor: str | None = None
            try:
                for _ in range(MAX_PAGES):
                    page = await client.list_tools(cursor=cursor)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except Exception as exc:  # noqa: BLE001 - a failing upstream shows no tools
                print(f"warden mcp: upstream {name!r} did not list its tools: {exc}", file=sys.stderr)
                continue
            out[name] = tools
        return out

    async def call(self, upstream: str, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        return await self._clients[upstream].call_tool(tool, arguments)
