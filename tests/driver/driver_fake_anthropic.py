"""A local HTTP fake of the Anthropic Messages API, on loopback, for the real SDK to talk to.

Queue replies with the helpers; each POST /v1/messages pops one. Requests are kept for asserts.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


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
