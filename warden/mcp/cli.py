"""`warden mcp serve|pins`: the governing MCP gateway (docs/mcp.md)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def register(subparsers: argparse._SubParsersAction) -> None:
    mcp = subparsers.add_parser("mcp", help="a governing MCP gateway in front of MCP servers",
                                description="Front MCP servers: the client sees only what the policy allows, and "
                                "every tools/call is a Check() first (docs/mcp.md).")
    sub = mcp.add_subparsers(dest="mcp_command", metavar="SUBCOMMAND")
    serve = sub.add_parser("serve", help="serve MCP clients over stdio or streamable HTTP",
                           description="Serve one MCP client over stdio, for the person and agent of the settings "
                           "file; or, with --http, every client named in its [clients.NAME] over streamable HTTP, "
                           "each for its own person and agent by its bearer token.")
    serve.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    pins = sub.add_parser("pins", help="the upstream tool definitions pinned at admission")
    pins.add_argument("action", choices=("list", "accept"))
    pins.add_argument("names", nargs="*", metavar="NAME", help="for accept: the tools whose new definition you reviewed")
    for p in (serve, pins):
        p.add_argument("--settings", metavar="FILE", required=True, help="the gateway's settings file (TOML)")
        p.add_argument("--state", metavar="FOLDER", help="pins and the approval inbox (overrides the settings file)")
    serve.set_defaults(func=_serve)
    pins.set_defaults(func=_pins)
    mcp.set_defaults(func=lambda _a: (mcp.print_help(), 2)[1])


def _settings(args: argparse.Namespace) -> Any:
    from warden.mcp.settings import SettingsError, load

    try:
        return load(Path(args.settings), state=Path(args.state) if args.state else None)
    except SettingsError as exc:
        raise SystemExit(f"warden mcp: {exc}") from None


def _serve(args: argparse.Namespace) -> int:
    import anyio

    settings = _settings(args)
    if args.http and not settings.clients:
        raise SystemExit("warden mcp: --http serves the clients of [clients.NAME]; the settings name none")
    if not args.http and not (settings.person and settings.agent):
        raise SystemExit("warden mcp: serving stdio needs `person` and `agent` in the settings")
    anyio.run(_serving, settings, args.http)
    return 0


async def _serving(settings: Any, http: str | None) -> None:
    from warden.auth import load_tokens
    from warden.client import ApprovalInbox, CheckpointClient
    from warden.datafolder import read_credential
    from warden.mcp.gateway import Gateway
    from warden.mcp.pins import Pins
    from warden.mcp.principals import Principals
    from warden.mcp.upstreams import Upstreams

    token = read_credential(settings.token_file)
    tokens = load_tokens(settings.clients_file, require_names=True) if settings.clients_file else {}
    principals = Principals(settings, tokens, http=bool(http))
    with CheckpointClient(settings.checkpoint, token=token, timeout=settings.timeout, stream=True) as checkpoint:
        async with Upstreams(settings.upstreams, settings.max_result_bytes) as upstreams:
            gateway = Gateway(settings, checkpoint, upstreams, Pins(settings.state / "mcp-pins.json"),
                              ApprovalInbox(settings.state / "approvals.db"), principals)
            server = gateway.server()
            if http:
                from warden.mcp.http import serve_http

                await serve_http(server, principals, http)
                return
            from mcp.server.stdio import stdio_server

            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())


def _pins(args: argparse.Namespace) -> int:
    import anyio

    settings = _settings(args)
    return anyio.run(_pinning, settings, args.action, args.names)


async def _pinning(settings: Any, action: str, names: list[str]) -> int:
    from warden.mcp import catalog
    from warden.mcp.pins import Pins, digest
    from warden.mcp.upstreams import Upstreams

    pins = Pins(settings.state / "mcp-pins.json")
    async with Upstreams(settings.upstreams, settings.max_result_bytes) as upstreams:
        now = {catalog.exposed_name(u, t.name): catalog.definition(t)
               for u, tools in (await upstreams.listings()).items() for t in tools}
    if action == "list":
        for name, pin in sorted(pins.pinned().items()):
            state = "missing" if name not in now else "pinned" if digest(now[name]) == pin["sha256"] else "CHANGED"
            print(f"{name}  {state}  {pin['sha256'][:16]}")
        return 0
    for name in names:
        if name not in now:
            print(f"warden mcp pins: no upstream lists {name!r}", file=sys.stderr)
            return 1
        pins.accept(name, now[name])
        print(f"accepted: {name} {digest(now[name])[:16]}")
    return 0
