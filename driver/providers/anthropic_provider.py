"""The Anthropic adapter: the only module that imports the `anthropic` SDK.

Maps a Messages API response to a `ProviderReply`:
- each ``tool_use`` block becomes a raw ``tool_call`` action (id, name, input),
- a text answer that is a JSON object (optionally in a ```json fence) becomes that raw action
  (the model reports ``final`` or ``handoff`` this way),
- other prose becomes a reply with no action (the loop nudges),
- the stop reason is passed through, so the boundary turns max_tokens / refusal into `cut_off`.

SDK errors become `ProviderError` with a kind the provider breaker counts: overloaded (529),
credit (400/402 with a billing message), quota (429), auth (401/403), unavailable (connection),
error (anything else). The SDK's own retries are off: the loop counts every refusal.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic

from driver.boundary import ProviderReply
from driver.errors import ProviderError
from driver.providers.base import ModelRequest

_BILLING_WORDS = ("credit", "billing", "balance", "payment")


def _classify(exc: Exception) -> ProviderError:
    if isinstance(exc, anthropic.APIConnectionError):  # includes timeouts
        return ProviderError("unavailable", f"cannot reach the provider: {exc}")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        message = str(exc)
        if status == 529 or isinstance(exc, anthropic.OverloadedError):
            kind = "overloaded"
        elif status == 402 or (status == 400 and any(w in message.lower() for w in _BILLING_WORDS)):
            kind = "credit"
        elif status == 429:
            kind = "quota"
        elif status in (401, 403):
            kind = "auth"
        else:
            kind = "error"
        return ProviderError(kind, message, status=status)
    return ProviderError("error", f"{type(exc).__name__}: {exc}")


def _text_action(text: str) -> list[Any]:
    body = text.strip()
    if body.startswith("```"):
        body = body.strip("`")
        if body.startswith("json"):
            body = body[4:]
        body = body.strip()
    if not body.startswith("{"):
        return []
    try:
        return [json.loads(body)]
    except json.JSONDecodeError:
        return [body]  # it meant to be an object and is not: malformed_response at the boundary


def _messages(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for entry in transcript:
        role = entry["role"]
        if role == "user":
            add("user", [{"type": "text", "text": entry["text"]}])
        elif role == "assistant":
            reply = entry["reply"]
            blocks = reply.get("transcript")
            if not isinstance(blocks, list):  # written by another adapter: replay as text
                blocks = [{"type": "text", "text": json.dumps({"actions": reply.get("actions", [])})}]
            add("assistant", blocks or [{"type": "text", "text": "(no content)"}])
        elif role == "results":
            blocks = [
                {"type": "tool_result", "tool_use_id": r["call_id"], "content": r["content"],
                 "is_error": bool(r.get("is_error"))}
                for r in entry.get("results", [])
            ]
            if entry.get("text"):
                blocks.append({"type": "text", "text": entry["text"]})
            add("user", blocks)
    return messages


class AnthropicProvider:
    name = "anthropic"

    def __init__(self, model: str, api_key: str | None = None, base_url: str | None = None,
                 timeout_seconds: float = 120.0) -> None:
        self.model = model
        self._client = anthropic.Anthropic(api_key=api_key, base_url=base_url, max_retries=0,
                                           timeout=timeout_seconds)

    def complete(self, request: ModelRequest) -> ProviderReply:
        tools = [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                 for t in request.tools]
        try:
            resp = self._client.messages.create(
                model=self.model,
                max_tokens=request.max_tokens,
                system=request.system,
                messages=_messages(request.transcript),  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
            )
        except anthropic.AnthropicError as exc:
            raise _classify(exc) from exc
        actions: list[Any] = []
        texts: list[str] = []
        blocks: list[dict[str, Any]] = []
        for block in resp.content:
            if block.type == "tool_use":
                actions.append({"action": "tool_call", "id": block.id, "tool": block.name,
                                "arguments": block.input})
                blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
            elif block.type == "text":
                texts.append(block.text)
                blocks.append({"type": "text", "text": block.text})
        text = "\n".join(texts)
        actions.extend(_text_action(text))
        return ProviderReply(
            stop_reason=str(resp.stop_reason or "end_turn"),
            actions=actions,
            text=text,
            input_tokens=resp.usage.input_tokens,
            output_tokens=resp.usage.output_tokens,
            model=resp.model or self.model,
            transcript=blocks,
        )
