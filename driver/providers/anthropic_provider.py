"""The Anthropic adapter: the only module that imports the `anthropic` SDK.

Maps a Messages API response to a `ProviderReply`:
- each ``tool_use`` block becomes a raw ``tool_call`` action (id, name, input),
- a text answer that is a JSON object (optionally in a ```json fence) becomes that raw action,
  kept apart as a text action (the model reports ``final`` or ``handoff`` this way; a tool call
  written as text is refused at the boundary),
- other prose becomes a reply with no action (the loop nudges),
- a block of any other type is named in ``unknown_blocks``, and the boundary refuses the reply,
- the stop reason is passed through as it came (none is ""), so the boundary turns max_tokens /
  refusal into `cut_off` and any reason but end_turn / tool_use into `unknown_stop_reason`.

Each request is one the Messages API takes, whatever the run's transcript holds (`_messages`):
every tool_use id appears once in the request and is answered by exactly one tool_result, first in
the next user message. A reply that broke that (an id twice, an id the API would not take back)
is replayed with the offending block as text, and a result with no tool_use to answer goes as text.

SDK errors become `ProviderError` with a kind the provider breaker counts: overloaded (529),
credit (400/402 with a billing message), quota (429), auth (401/403), unavailable (connection),
error (anything else). The SDK's own retries are off: the loop counts every refusal.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anthropic

from driver import context
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


# The ids the Messages API takes back in a tool_result.
_TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def _not_run() -> str:
    return context.refusal_result("not_run", "this call did not run")


def _messages(transcript: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The transcript as Messages API messages that the API takes, by construction: see the
    module's docstring. A user message after tool calls is kept as results + other blocks until
    it closes, so the results always come first, one per open id (`not_run` for a missing one)."""
    messages: list[dict[str, Any]] = []
    used: set[str] = set()  # every tool_use id in the request so far
    open_ids: list[str] = []  # the last assistant message's tool_use ids, not answered yet
    results: dict[str, dict[str, Any]] = {}
    others: list[dict[str, Any]] = []

    def close_user() -> None:
        nonlocal open_ids, results, others
        if open_ids or results or others:
            answers = [results.get(i) or {"type": "tool_result", "tool_use_id": i, "content": _not_run(),
                                          "is_error": True} for i in open_ids]
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].extend(answers + others)
            else:
                messages.append({"role": "user", "content": answers + others})
        open_ids, results, others = [], {}, []

    def text(value: Any) -> dict[str, Any] | None:
        return {"type": "text", "text": value} if isinstance(value, str) and value else None

    for entry in transcript:
        role = entry["role"]
        if role == "user":
            others += [b for b in [text(entry.get("text"))] if b]
        elif role == "assistant":
            close_user()
            reply = entry["reply"]
            blocks = reply.get("transcript")
            if not isinstance(blocks, list):  # written by another adapter: replay as text
                blocks = [{"type": "text", "text": json.dumps({"actions": reply.get("actions", [])})}]
            replayed: list[dict[str, Any]] = []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_use":
                    call_id = b.get("id")
                    if isinstance(call_id, str) and _TOOL_USE_ID.match(call_id) and call_id not in used:
                        used.add(call_id)
                        open_ids.append(call_id)
                        replayed.append(b)
                    else:  # the API would refuse the whole request: keep what was said, as text
                        replayed.append({"type": "text", "text": "(a tool call refused unrun, its id "
                                         f"{json.dumps(call_id)} unusable: {b.get('name')} "
                                         f"{json.dumps(b.get('input'), default=str)})"})
                elif (t := text(b.get("text"))) is not None:
                    replayed.append(t)
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["content"].extend(replayed)
            else:
                messages.append({"role": "assistant", "content": replayed or [{"type": "text", "text": "(no content)"}]})
        elif role == "results":
            for r in entry.get("results", []):
                call_id = r.get("call_id")
                if call_id in open_ids and call_id not in results:
                    results[call_id] = {"type": "tool_result", "tool_use_id": call_id, "content": r["content"],
                                        "is_error": bool(r.get("is_error"))}
                elif (t := text(r.get("content"))) is not None:  # no tool_use of its own to answer
                    others.append(t)
            others += [b for b in [text(entry.get("text"))] if b]
    close_user()
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
        unknown: list[str] = []
        for block in resp.content:
            if block.type == "tool_use":
                actions.append({"action": "tool_call", "id": block.id, "tool": block.name,
                                "arguments": block.input})
                blocks.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
            elif block.type == "text":
                texts.append(block.text)
                blocks.append({"type": "text", "text": block.text})
            else:  # not replayed: the boundary refuses the reply
                unknown.append(str(block.type))
        text = "\n".join(texts)
        return ProviderReply(
            stop_reason=str(resp.stop_reason or ""),
            actions=actions,
            text_actions=_text_action(text),
            unknown_blocks=unknown,
            text=text,
            input_tokens=resp.usage.input_tokens,
            output_tokens=resp.usage.output_tokens,
            model=resp.model or self.model,
            transcript=blocks,
        )
