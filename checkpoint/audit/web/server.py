"""`warden audit serve`: the auditor's read-only web view, over the standard library's HTTP server.

Only GET (and HEAD) exist: there is no endpoint that writes, so nothing the view offers can change
the log, the policies or a run. The routes:

- `/`, `/app.js`, `/app.css`: one static page (plain HTML and JavaScript, no build step, no CDN);
  it holds no data, so it is served to anyone, and asks for the auditor's token.
- `/api/...`: JSON, each behind the auditor's credential (`Authorization: Bearer TOKEN`). No or a
  wrong credential: 401 and an empty body's worth of JSON, nothing else. A credential that may read
  no record: 403 with its stable code. Records of tenants the credential may not audit are as if
  absent: filtered out of every list, a run of theirs is 404 like a made-up id.

Every answer carries a Content-Security-Policy that allows only this origin's own script and
style (no inline script, no eval, no framing), and `nosniff`; API answers are never cached.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.web.access import Auditor, AuditRefused, Gate
from checkpoint.audit.web.views import DEFAULT_LIMIT, MAX_LIMIT, MAX_WAIT, RUNS_LIMIT, DecisionViews

log = logging.getLogger(__name__)

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
MAX_PARAM = 256  # characters of one query parameter: ids, names and subjects are shorter
MAX_WAITERS = 16  # long polls held at once; more are answered at once (no wait), not queued
# The stream's filters: query parameter -> the log's filter. Anything else is refused (400), so a
# misspelt filter never widens a query silently.
STREAM_FILTERS = {
    "run": "run_id", "tree": "root_run_id", "agent": "agent", "verdict": "verdict", "code": "code",
    "tenant": "tenant", "tool": "tool", "action": "action", "rule": "rule", "person": "person",
    "caller": "caller", "principal": "principal", "approver": "approver", "text": "text",
    "since": "since", "until": "until",
}
VERDICTS = ("ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT")
_RUN_PATH = re.compile(r"/api/runs/([^/]{1,256})")


class BadRequest(Exception):
    """A request the API refuses: 400 with code `invalid_request` and what was wrong."""


class AuditWebServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], gate: Gate, views: DecisionViews) -> None:
        self.gate = gate
        self.views = views
        self.stopping = threading.Event()
        self.waiters = threading.BoundedSemaphore(MAX_WAITERS)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a browser that moved on (a new filter aborts the poll it had open): not an error
        super().handle_error(request, client_address)

    def shutdown(self) -> None:
        self.stopping.set()  # long polls answer at once
        super().shutdown()


class Handler(BaseHTTPRequestHandler):
    server: AuditWebServer
    server_version = "warden-audit"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    # A connection that sends nothing for this long is closed: idle or slow clients cannot hold
    # threads for ever (a long poll answers within MAX_WAIT, well inside it).
    timeout = 60

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.info("%s %s", self.address_string(), format % args)

    # -- methods ---------------------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle(head=False)

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def _refuse_method(self) -> None:
        self._send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"code": "method_not_allowed",
                                                        "message": "this view only reads: GET"},
                        extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = _refuse_method

    # -- routing ---------------------------------------------------------------------------

    def _handle(self, *, head: bool) -> None:
        self._head = head
        url = urlsplit(self.path)
        path = url.path
        if path in STATIC:
            self._send_static(*STATIC[path])
            return
        if not path.startswith("/api/"):
            self._send_json(HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such page"})
            return
        try:
            auditor = self.server.gate.authenticate(self.headers.get("Authorization"))
        except AuditRefused as refused:
            self._send_json(HTTPStatus.FORBIDDEN, {"code": refused.code, "message": refused.message})
            return
        if auditor is None:
            self._send_json(HTTPStatus.UNAUTHORIZED, {"code": "unauthenticated"},
                            extra={"WWW-Authenticate": 'Bearer realm="warden-audit"'})
            return
        try:
            params = _params(url.query)
            status, body = self._api(path, params, auditor)
        except BadRequest as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"code": "invalid_request", "message": str(exc)}
        except (AuditUnavailable, FileNotFoundError) as exc:
            status, body = HTTPStatus.SERVICE_UNAVAILABLE, {"code": "audit_unavailable", "message": str(exc)}
        self._send_json(status, body)

    def _api(self, path: str, params: dict[str, str], auditor: Auditor) -> tuple[HTTPStatus, dict[str, Any]]:
        views = self.server.views
        routes: dict[str, tuple[set[str], Callable[[], dict[str, Any]]]] = {
            "/api/me": (set(), lambda: {"caller": auditor.caller, "principal": auditor.principal,
                                        "tenants": auditor.tenants, "verify_interval": views.verify_interval,
                                        "policy_revision": self.server.gate.policy_revision}),
            "/api/decisions": ({"after", "limit", "wait", *STREAM_FILTERS}, lambda: self._decisions(params, auditor)),
            "/api/runs": ({"limit"}, lambda: views.runs(_int(params, "limit", DEFAULT_LIMIT, 1, RUNS_LIMIT),
                                                       auditor.tenants)),
            "/api/verify": (set(), views.verify),
            "/api/stats": (set(), lambda: views.agent_stats(auditor.tenants)),
        }
        if path in routes:
            allowed, answer = routes[path]
            _only(params, allowed)
            return HTTPStatus.OK, answer()
        match = _RUN_PATH.fullmatch(path)
        if match:
            _only(params, set())
            found = views.run(unquote(match[1]), auditor.tenants)
            if found is None:
                return HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such run"}
            return HTTPStatus.OK, found
        return HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such endpoint"}

    def _decisions(self, params: dict[str, str], auditor: Auditor) -> dict[str, Any]:
        from checkpoint.audit.moments import since as _since

        filters: dict[str, Any] = {STREAM_FILTERS[k]: v for k, v in params.items() if k in STREAM_FILTERS and v}
        if "verdict" in filters:
            filters["verdict"] = filters["verdict"].upper()
            if filters["verdict"] not in VERDICTS:
                raise BadRequest(f"verdict is one of {', '.join(VERDICTS)}")
        for name in ("since", "until"):
            if name in filters:
                try:
                    filters[name] = _since(filters[name])
                except Exception as exc:  # noqa: BLE001 - argparse's type error, whatever its class
                    raise BadRequest(f"{name}: {exc}") from None
        after = _int(params, "after", None, 0, None)
        limit = _int(params, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
        wait = float(_int(params, "wait", 0, 0, int(MAX_WAIT)) or 0)
        views = self.server.views
        # Too many long polls held already: answer at once; the page polls again.
        if not wait or not self.server.waiters.acquire(blocking=False):
            return views.decisions(after, limit, tenants=auditor.tenants, **filters)
        try:
            return views.decisions(after, limit, wait=wait, stop=self.server.stopping, tenants=auditor.tenants,
                                   **filters)
        finally:
            self.server.waiters.release()

    # -- answers ---------------------------------------------------------------------------

    def _headers(self, status: HTTPStatus, content_type: str, length: int, extra: dict[str, str]) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(length))
        self.send_header("Content-Security-Policy", CSP)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        for name, value in extra.items():
            self.send_header(name, value)
        self.end_headers()

    def _send_json(self, status: HTTPStatus, body: dict[str, Any], extra: dict[str, str] | None = None) -> None:
        text = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
        # < > & only ever stand inside JSON strings: escaped, no answer reads as markup to anything
        # that sniffs, whatever a record holds.
        data = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()
        self._headers(status, "application/json", len(data), {"Cache-Control": "no-store", **(extra or {})})
        if not self._head_only():
            self.wfile.write(data)

    def _send_static(self, name: str, content_type: str) -> None:
        data = resources.files("checkpoint.audit.web").joinpath("static", name).read_bytes()
        self._headers(HTTPStatus.OK, content_type, len(data), {"Cache-Control": "no-cache"})
        if not self._head_only():
            self.wfile.write(data)

    def _head_only(self) -> bool:
        return getattr(self, "_head", False)


def _params(query: str) -> dict[str, str]:
    try:
        parsed = parse_qs(query, keep_blank_values=True, max_num_fields=64)
    except ValueError as exc:  # more fields than that: refused like any other bad query, not dropped
        raise BadRequest(str(exc)) from None
    out = {}
    for name, values in parsed.items():
        if len(values) != 1:
            raise BadRequest(f"{name[:40]!r} is given {len(values)} times")
        if len(values[0]) > MAX_PARAM:
            raise BadRequest(f"{name[:40]!r} is longer than {MAX_PARAM} characters")
        out[name] = values[0]
    return out


def _only(params: dict[str, str], allowed: set[str]) -> None:
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise BadRequest(f"unknown parameter(s): {', '.join(n[:40] for n in unknown)}")


def _int(params: dict[str, str], name: str, default: int | None, low: int, high: int | None) -> Any:
    text = params.get(name, "")
    if text == "":
        return default
    # ASCII digits only: str.isdigit() also takes '²' (int() refuses it) and other scripts' digits
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise BadRequest(f"{name} is a whole number")
    value = int(text)
    if value < low or (high is not None and value > high):
        raise BadRequest(f"{name} is from {low}" + (f" to {high}" if high is not None else " up"))
    return value


def make_server(host: str, port: int, gate: Gate, views: DecisionViews) -> AuditWebServer:
    return AuditWebServer((host, port), gate, views)
