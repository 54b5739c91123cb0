"""A local HTTP fake of the Anthropic Messages API, on loopback, for the real SDK to talk to.

Queue replies with the helpers; each POST /v1/messages pops one. Requests are kept for asserts.

Every request is first checked the way the real API checks it (`request_problems`): a request
the real API would refuse with a 400 `invalid_request_error` is refused here too, before a reply
is popped, so a test that passes against the fake proves the driver's follow-up requests valid.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The real API's patterns: a tool's name, and a tool_use id it will take back in a tool_result.
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
TOOL_USE_ID = re.compile(r"^[a-zA-Z0-9_-]+$")


def request_problems(body: dict[str, Any]) -> list[str]:
    """What the real Messages API would refuse in this request body (empty when it is valid):
    the model, max_tokens, tool definitions, block shapes, and the pairing of tool calls with
    results: tool_use ids unique in the request, and the user message right after an assistant
    message answers each of its tool_use ids with exactly one tool_result, results first."""
    problems: list[str] = []
    if not isinstance(body.get("model"), str) or not body["model"]:
        problems.append("model: field required")
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        problems.append("max_tokens: must be a positive integer")
    names = [t.get("name") for t in body.get("tools") or []]
    for i, name in enumerate(names):
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            problems.append(f"tools.{i}.name: String should match pattern '{TOOL_NAME.pattern}'")
    if len(set(map(str, names))) != len(names):
        problems.append("tools: Tool names must be unique.")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return problems + ["messages: at least one message is required"]
    if messages[0].get("role") != "user":
        problems.append("messages.0.role: the first message must use the user role")
    seen_ids: set[str] = set()
    for n, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ("user", "assistant"):
            problems.append(f"messages.{n}.role: Input should be 'user' or 'assistant'")
            continue
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list) or not content:
            problems.append(f"messages.{n}: all messages must have non-empty content")
            continue
        for k, b in enumerate(content):
            kind = b.get("type") if isinstance(b, dict) else None
            where = f"messages.{n}.content.{k}"
            if kind == "text":
                if not isinstance(b.get("text"), str) or not b["text"]:
                    problems.append(f"{where}: text content blocks must be non-empty")
            elif kind == "tool_use":
                if role != "assistant":
                    problems.append(f"{where}: tool_use blocks may appear only in assistant messages")
                if not isinstance(b.get("id"), str) or not TOOL_USE_ID.match(b["id"]):
                    problems.append(f"{where}.id: String should match pattern '{TOOL_USE_ID.pattern}'")
                elif b["id"] in seen_ids:
                    problems.append(f"{where}: `tool_use` ids must be unique")
                else:
                    seen_ids.add(b["id"])
                if not isinstance(b.get("name"), str) or not TOOL_NAME.match(b["name"]):
                    problems.append(f"{where}.name: String should match pattern '{TOOL_NAME.pattern}'")
                if not isinstance(b.get("input"), dict):
                    problems.append(f"{where}.input: Input should be a valid dictionary")
            elif kind == "tool_result":
                if role != "user":
                    problems.append(f"{where}: tool_result blocks may appear only in user messages")
            else:
                problems.append(f"{where}.type: unknown content block type {kind!r}")
        uses = [b["id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_use"
                and isinstance(b.get("id"), str)]
        following = messages[n + 1].get("content") if n + 1 < len(messages) else None
        if role == "assistant" and uses and n + 1 < len(messages):
            answer = following if isinstance(following, list) else []
            results = [b.get("tool_use_id") for b in answer if isinstance(b, dict) and b.get("type") == "tool_result"]
            missing = [u for u in uses if u not in results]
            if messages[n + 1].get("role") != "user" or missing:
                problems.append(f"messages.{n}: `tool_use` ids were found without `tool_result` blocks "
                                f"immediately after: {', '.join(missing or uses)}")
            twice = sorted({r for r in results if results.count(r) > 1})
            if twice:
                problems.append(f"messages.{n + 1}: each `tool_use` id must be answered by one `tool_result` "
                                f"block; answered more than once: {', '.join(map(str, twice))}")
            kinds = [b.get("type") for b in answer if isinstance(b, dict)]
            count = kinds.count("tool_result")
            if kinds[:count] != ["tool_result"] * count:
                problems.append(f"messages.{n + 1}: `tool_result` blocks must come first in the message, "
                                "before any other content")
        if role == "user":
            previous = messages[n - 1] if n > 0 else {}
            offered = {b.get("id") for b in previous.get("content") or [] if isinstance(b, dict)
                       and b.get("type") == "tool_use"} if previous.get("role") == "assistant" else set()
            for k, b in enumerate(content):
                if isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") not in offered:
                    problems.append(f"messages.{n}.content.{k}: unexpected `tool_use_id` found in `tool_result` "
                                    f"blocks: {b.get('tool_use_id')}. Each `tool_result` block must have a "
                                    "corresponding `tool_use` block in the previous message.")
    return problems


def message(content: list[dict[str, Any]], stop_reason: str, *, input_tokens: int = 100,
            output_tokens: int = 20, model: str = "claude-fake") -> tuple[int, dict[str, Any]]:
    return 200, {
        "id": "msg_fake", "type": "message", "role": "assistant", "model": model,
        "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def tool_use(name: str, arguments: dict[str, Any], call_id: str = "toolu_1", **kw: Any) -> tuple[int, dict]:
    return message([{"type": "tool_use", "id": call_id, "name": name, "input": arguments}], "tool_use", **kw)


def end_turn(text: str, **kw: Any) -> tuple[int, dict[str, Any]]:
    return message([{"type": "text", "text": text}], "end_turn", **kw)


def max_tokens(name: str = "create_task_from_template", **kw: Any) -> tuple[int, dict[str, Any]]:
    # A tool input cut short by the token limit: the boundary must never run it.
    return message([{"type": "tool_use", "id": "toolu_cut", "name": name, "input": {"template": "nm"}}],
                   "max_tokens", **kw)


def overloaded() -> tuple[int, dict[str, Any]]:
    return 529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}


def credit() -> tuple[int, dict[str, Any]]:
    return 400, {"type": "error", "error": {"type": "invalid_request_error",
                 "message": "Your credit balance is too low to access the Anthropic API. "
                            "Please go to Plans & Billing to upgrade or purchase credits."}}


class FakeMessagesAPI:
    def __init__(self) -> None:
        self.replies: list[tuple[int, dict[str, Any]]] = []
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        # seconds to wait before answering the n-th request (0-based): a model that takes its time
        self.delays: dict[int, float] = {}
        # what the real API would have refused, per refused request (a test asserts it stays empty)
        self.refused: list[list[str]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                time.sleep(fake.delays.get(len(fake.requests), 0.0))
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                if self.path.rstrip("/") != "/v1/messages":
                    status, payload = 404, {"type": "error", "error": {"type": "not_found_error",
                                                                       "message": self.path}}
                elif problems := request_problems(body):
                    fake.refused.append(problems)
                    status, payload = 400, {"type": "error", "error": {"type": "invalid_request_error",
                                                                       "message": "; ".join(problems)}}
                elif fake.replies:
                    status, payload = fake.replies.pop(0)
                else:
                    status, payload = 500, {"type": "error", "error": {"type": "api_error",
                                                                       "message": "fake: no reply queued"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> FakeMessagesAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
