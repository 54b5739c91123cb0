"""The tools a client is shown: each upstream's tools under `UPSTREAM__TOOL`, only those the run's
pinned allowlist names, only as pinned, never two under one name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types

from warden.mcp import codes
from warden.mcp.pins import Pins

POLICY_NAME = re.compile(r"^[a-z][a-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class Exposed:
    name: str  # the client's and the policy's name
    upstream: str
    upstream_name: str  # the upstream's own name
    tool: types.Tool  # as the client sees it
    refused: str = ""  # a code: the tool is listed to nobody and every call of it is refused


def definition(tool: types.Tool) -> dict[str, Any]:
    """What is pinned: everything an upstream says about a tool that a client or model reads."""
    return {"name": tool.name, "title": tool.title, "description": tool.description,
            "inputSchema": tool.input_schema, "outputSchema": tool.output_schema,
            "annotations": tool.annotations.model_dump(mode="json") if tool.annotations else None}


def exposed_name(upstream: str, tool: str) -> str:
    return f"{upstream}__{tool}".lower()


def build(listings: dict[str, list[types.Tool]], allowed: frozenset[str], pins: Pins) -> dict[str, Exposed]:
    """Every upstream tool the allowlist names, by its exposed name, each with why it is refused
    when it is (changed since pinned, or a name two tools would share)."""
    seen: dict[str, list[tuple[str, types.Tool]]] = {}
    for upstream, tools in sorted(listings.items()):
        for tool in tools:
            seen.setdefault(exposed_name(upstream, tool.name), []).append((upstream, tool))
    out: dict[str, Exposed] = {}
    for name, found in seen.items():
        if name not in allowed or not POLICY_NAME.match(name):
            continue  # the policy does not admit it: never pinned, never shown
        upstream, tool = found[0]
        shown = types.Tool(name=name, title=tool.title, description=tool.description, input_schema=tool.input_schema,
                           output_schema=tool.output_schema, annotations=tool.annotations)
        if len(found) > 1:
            refused = codes.TOOL_NAME_COLLISION
        else:
            refused = "" if pins.check(name, definition(tool)) else codes.UPSTREAM_TOOL_CHANGED
        out[name] = Exposed(name, upstream, tool.name, shown, refused)
    return out
