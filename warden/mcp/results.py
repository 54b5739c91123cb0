"""What the client gets back: an upstream's result scrubbed of credentials and held to a size,
or a refusal as a tool result marked as an error, with its stable code."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from warden.mcp import codes
from warden.scrub import Scrubber

_SCRUBBER = Scrubber()


def refusal(code: str, reason: str, **details: Any) -> types.CallToolResult:
    """A verdict the client can survive: an ordinary tool result, marked as an error."""
    warden = {"code": code, "reason": reason, **details}
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"warden: {code}: {reason}")],
                                structured_content={"warden": warden}, is_error=True)


def _scrub_value(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        return _SCRUBBER.scrub(value)
    if isinstance(value, list):
        pairs = [_scrub_value(v) for v in value]
        return [p[0] for p in pairs], sum(p[1] for p in pairs)
    if isinstance(value, dict):
        masked = 0
        out = {}
        for key, item in value.items():
            out[key], n = _scrub_value(item)
            masked += n
        return out, masked
    return value, 0


def _scrub_block(block: types.ContentBlock) -> tuple[types.ContentBlock, int]:
    if isinstance(block, types.TextContent):
        text, masked = _SCRUBBER.scrub(block.text)
        return block.model_copy(update={"text": text}), masked
    if isinstance(block, types.EmbeddedResource) and isinstance(block.resource, types.TextResourceContents):
        text, masked = _SCRUBBER.scrub(block.resource.text)
        return block.model_copy(update={"resource": block.resource.model_copy(update={"text": text})}), masked
    return block, 0  # images, audio and blobs are passed as they are (docs/mcp.md)


def too_large(result: types.CallToolResult, max_bytes: int) -> str:
    """Why the result is not passed on for its size ("" when it may be)."""
    size = len(json.dumps(result.model_dump(mode="json", by_alias=True), default=str))
    if size > max_bytes:
        return f"the upstream's result is {size} bytes, more than the {max_bytes} the gateway passes on"
    return ""


def scrubbed(result: types.CallToolResult, max_bytes: int) -> tuple[types.CallToolResult, int]:
    """The result with every credential masked, and how many were; a refusal when it is too large."""
    if why := too_large(result, max_bytes):
        return refusal(codes.RESULT_TOO_LARGE, why), 0
    masked = 0
    content = []
    for block in result.content:
        clean, n = _scrub_block(block)
        content.append(clean)
        masked += n
    structured = None
    if result.structured_content is not None:
        structured, n = _scrub_value(result.structured_content)
        masked += n
    return types.CallToolResult(content=content, structured_content=structured, is_error=result.is_error), masked
