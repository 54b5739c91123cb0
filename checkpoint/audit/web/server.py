"""`warden audit serve`: the auditor's read-only web view, a WSGI application served by cheroot.

The server is cheroot (CherryPy's HTTP server: pure Python, threaded, TLS built in) rather than the
standard library's development server, which ignores a GET's body and so parsed it as a second
request. cheroot parses the framing itself (Content-Length, chunked) with header and body limits;
on top, a request that carries a body at all is refused and its connection closed before the body
is read: nothing here takes one, and no front proxy and this server can then disagree on where a
request ends. Threads suit the views, which block (a long poll waits for the log).

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
import ssl
import threading
from collections.abc import Callable, Iterable
from http import HTTPStatus
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from cheroot import server as cheroot_server
from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from checkpoint.audit.errors import AuditUnavailable
from checkpoint.audit.web.access import Auditor, AuditRefused, Gate
from checkpoint.audit.web.views import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    MAX_WAIT,
    RUN_STATUSES,
    RUNS_LIMIT,
    DecisionViews,
)

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
THREADS = MAX_WAITERS + 8  # so the long polls held never take the last thread from other requests
# The request line and headers together: a token, a URL of at most 64 parameters of MAX_PARAM
# characters and a browser's usual headers fit well inside; more is refused (400) unread.
MAX_HEADER_BYTES = 32 * 1024
MAX_HEADERS = 100  # header lines of one request, as the standard library's http.client allows
MAX_BODY_BYTES = 1024  # nothing takes a body; cheroot refuses a larger one (413) before our check
# A connection that sends nothing for this long is closed: idle or slow clients cannot hold
# threads for ever (a long poll answers within MAX_WAIT, well inside it).
IDLE_TIMEOUT = 60
# The stream's filters: query parameter -> the log's filter. Anything else is refused (400), so a
# misspelt filter never widens a query silently.
STREAM_FILTERS = {
    "run": "run_id", "tree": "root_run_id", "agent": "agent", "verdict": "verdict", "code": "code",
    "tenant": "tenant", "tool": "tool", "action": "action", "rule": "rule", "person": "person",
    "caller": "caller", "principal": "principal", "approver": "approver", "text": "text",
    "since": "since", "until": "until",
}
# The runs list's filters: query parameter -> the filter of their start records; `status` and
# `refused` (1: only runs with a DENY or HALT) are read from each run's records.
RUNS_FILTERS = {"agent": "agent", "person": "person", "since": "since", "until": "until"}
VERDICTS = ("ALLOW", "DENY", "REQUIRE_APPROVAL", "HALT")
_RUN_PATH = re.compile(r"/api/runs/([^/]{1,256})")


class BadRequest(Exception):
    """A request the API refuses: 400 with code `invalid_request` and what was wrong."""


_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SINGLE = {b"Content-Length", b"Transfer-Encoding", b"Host", b"Authorization"}


class _StrictHeaders(cheroot_server.HeaderReader):
    """Header lines as RFC 9112 wants a server to take them, where cheroot is lenient: a folded line
    (which cheroot lets replace the value before it), a name with spaces before its colon, a
    second Content-Length (cheroot keeps the last), a CR or NUL in a value. Each is how a front
    proxy and this server come to disagree on where a request ends, so each is refused (400)."""

    def __call__(self, rfile: Any, hdict: dict[bytes, bytes] | None = None) -> dict[bytes, bytes]:
        hdict = {} if hdict is None else hdict
        for _ in range(MAX_HEADERS + 1):
            line = rfile.readline()
            if not line:
                raise ValueError("Illegal end of headers.")
            if line == b"\r\n":
                return hdict
            if not line.endswith(b"\r\n"):
                raise ValueError("HTTP requires CRLF terminators")
            if line[:1] in (b" ", b"\t"):
                raise ValueError("Folded header lines are not accepted.")
            name, colon, value = line[:-2].partition(b":")
            if not colon or not _TOKEN.fullmatch(name):
                raise ValueError("Illegal header line.")
            value = value.strip(b" \t")
            if any(c in value for c in b"\r\n\x00"):
                raise ValueError("Illegal header value.")
            if b"_" in name:
                continue  # as cheroot's DropUnderscoreHeaderReader: X_A would pass for X-A in the environ
            key = name.title()
            if key in hdict:
                if key in _SINGLE:
                    raise ValueError(f"Repeated {key.decode()} header.")
                value = hdict[key] + b", " + value  # a repeated field is one list (RFC 9110, 5.3)
            hdict[key] = value
        raise ValueError(f"More than {MAX_HEADERS} header lines.")


class _Request(cheroot_server.HTTPRequest):
    """cheroot's request, refusing any request that carries a body before a byte of it is read."""

    header_reader = _StrictHeaders()

    def read_request_headers(self) -> bool:
        if not super().read_request_headers():
            return False
        declared = self.inheaders.get(b"Content-Length", b"0").strip()
        if self.inheaders.get(b"Transfer-Encoding") is not None or declared not in (b"", b"0"):
            # a view that only reads takes no body; answering and closing, unread, leaves nothing
            # of it on the connection to be parsed as the next request
            self.simple_response("400 Bad Request", "this view takes no request body")
            self.close_connection = True
            return False
        return True


class _Connection(cheroot_server.HTTPConnection):
    RequestHandlerClass = _Request


class AuditWebServer:
    """The page's server: bound when made (`port` is known, a busy address fails at once)."""

    def __init__(self, address: tuple[str, int], gate: Gate, views: DecisionViews) -> None:
        self.gate = gate
        self.views = views
        self.stopping = threading.Event()
        self.waiters = threading.BoundedSemaphore(MAX_WAITERS)
        self.app = AuditApp(self)
        self._server = wsgi.Server(address, self.app, numthreads=THREADS, max=THREADS, timeout=IDLE_TIMEOUT,
                                   server_name="warden-audit")
        self._server.version = "warden-audit"  # the Server header names no library or version
        self._server.max_request_header_size = MAX_HEADER_BYTES
        self._server.max_request_body_size = MAX_BODY_BYTES
        self._server.ConnectionClass = _Connection
        self._server.error_log = _error_log  # type: ignore[method-assign]
        self._server.prepare()  # binds and listens; serve_forever() then accepts
        self._served = threading.Event()

    @property
    def port(self) -> int:
        return int(self._server.bind_addr[1])

    def use_tls(self, cert: str, key: str) -> None:
        """Serve HTTPS with this certificate and key (TLS 1.2 at least); raises when they do not load,
        or when another user could have written them (UntrustedFileError)."""
        from warden.private import read_trusted

        read_trusted(key, "TLS private key")
        read_trusted(cert, "TLS certificate")
        adapter = BuiltinSSLAdapter(cert, key)
        adapter.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._server.ssl_adapter = adapter

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Serve until `shutdown()` (from another thread) or KeyboardInterrupt."""
        self._server.expiration_interval = poll_interval
        self._served.set()
        try:
            self._server.serve()
        finally:
            self.server_close()

    def shutdown(self) -> None:
        self.stopping.set()  # long polls answer at once
        self._server.stop()

    def server_close(self) -> None:
        self.stopping.set()
        self._server.stop()


def _error_log(msg: str = "", level: int = 20, traceback: bool = False) -> None:
    # cheroot reports a client that went away (a new filter aborts the poll the page had open) as
    # an error; only what is worse than that is worth a line
    if level >= logging.ERROR:
        log.error("%s", msg, exc_info=traceback)


class AuditApp:
    """The WSGI application: routes, authentication, answers."""

    def __init__(self, server: AuditWebServer) -> None:
        self.server = server

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        head = method == "HEAD"
        if method not in ("GET", "HEAD"):
            return self._json(start_response, head, HTTPStatus.METHOD_NOT_ALLOWED,
                              {"code": "method_not_allowed", "message": "this view only reads: GET"},
                              {"Allow": "GET, HEAD"})
        # the target as sent: PATH_INFO is already percent-decoded, and a run id may hold "%2F"
        target = environ.get("REQUEST_URI") or quote(environ.get("PATH_INFO", "/"), safe="/")
        url = urlsplit(target)
        path = url.path
        query = url.query if environ.get("REQUEST_URI") else environ.get("QUERY_STRING", "")
        if path in STATIC:
            return self._static(start_response, head, *STATIC[path])
        if not path.startswith("/api/"):
            return self._json(start_response, head, HTTPStatus.NOT_FOUND, {"code": "not_found", "message": "no such page"})
        try:
            auditor = self.server.gate.authenticate(environ.get("HTTP_AUTHORIZATION"))
        except AuditRefused as refused:
            return self._json(start_response, head, HTTPStatus.FORBIDDEN, {"code": refused.code, "message": refused.message})
        if auditor is None:
            return self._json(start_response, head, HTTPStatus.UNAUTHORIZED, {"code": "unauthenticated"},
                              {"WWW-Authenticate": 'Bearer realm="warden-audit"'})
        try:
            params = _params(query)
            status, body = self._api(path, params, auditor)
        except BadRequest as exc:
            status, body = HTTPStatus.BAD_REQUEST, {"code": "invalid_request", "message": str(exc)}
        except (AuditUnavailable, FileNotFoundError) as exc:
            status, body = HTTPStatus.SERVICE_UNAVAILABLE, {"code": "audit_unavailable", "message": str(exc)}
        return self._json(start_response, head, status, body)

    # -- routing ---------------------------------------------------------------------------

    def _api(self, path: str, params: dict[str, str], auditor: Auditor) -> tuple[HTTPStatus, dict[str, Any]]:
        views = self.server.views
        routes: dict[str, tuple[set[str], Callable[[], dict[str, Any]]]] = {
            "/api/me": (set(), lambda: {"caller": auditor.caller, "principal": auditor.principal,
                                        "tenants": auditor.tenants, "verify_interval": views.verify_interval,
                                        "policy_revision": self.server.gate.policy_revision}),
            "/api/decisions": ({"after", "limit", "wait", *STREAM_FILTERS}, lambda: self._decisions(params, auditor)),
            "/api/runs": ({"limit", "status", "refused", *RUNS_FILTERS}, lambda: self._runs(params, auditor)),
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

    def _runs(self, params: dict[str, str], auditor: Auditor) -> dict[str, Any]:
        filters: dict[str, Any] = _moments({RUNS_FILTERS[k]: v for k, v in params.items() if k in RUNS_FILTERS and v})
        status = params.get("status") or None
        if status is not None and status not in RUN_STATUSES:
            raise BadRequest(f"status is one of {', '.join(RUN_STATUSES)}")
        if params.get("refused", "") not in ("", "0", "1"):
            raise BadRequest("refused is 1 (only runs with a DENY or HALT) or 0")
        limit = _int(params, "limit", DEFAULT_LIMIT, 1, RUNS_LIMIT)
        return self.server.views.runs(limit, status=status, refused=params.get("refused") == "1",
                                      tenants=auditor.tenants, **filters)

    def _decisions(self, params: dict[str, str], auditor: Auditor) -> dict[str, Any]:
        filters: dict[str, Any] = _moments({STREAM_FILTERS[k]: v for k, v in params.items()
                                            if k in STREAM_FILTERS and v})
        if "verdict" in filters:
            filters["verdict"] = filters["verdict"].upper()
            if filters["verdict"] not in VERDICTS:
                raise BadRequest(f"verdict is one of {', '.join(VERDICTS)}")
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

    @staticmethod
    def _answer(start_response: Callable[..., Any], head: bool, status: HTTPStatus, content_type: str,
                data: bytes, extra: dict[str, str]) -> list[bytes]:
        headers = [
            ("Content-Type", content_type),
            ("Content-Length", str(len(data))),
            ("Content-Security-Policy", CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            ("X-Frame-Options", "DENY"),
            ("Cross-Origin-Resource-Policy", "same-origin"),
            *extra.items(),
        ]
        start_response(f"{status.value} {status.phrase}", headers)
        return [] if head else [data]

    def _json(self, start_response: Callable[..., Any], head: bool, status: HTTPStatus, body: dict[str, Any],
              extra: dict[str, str] | None = None) -> list[bytes]:
        text = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
        # < > & only ever stand inside JSON strings: escaped, no answer reads as markup to anything
        # that sniffs, whatever a record holds.
        data = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode()
        return self._answer(start_response, head, status, "application/json", data,
                            {"Cache-Control": "no-store", **(extra or {})})

    def _static(self, start_response: Callable[..., Any], head: bool, name: str, content_type: str) -> list[bytes]:
        data = resources.files("checkpoint.audit.web").joinpath("static", name).read_bytes()
        return self._answer(start_response, head, HTTPStatus.OK, content_type, data, {"Cache-Control": "no-cache"})


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


def _moments(filters: dict[str, Any]) -> dict[str, Any]:
    """`since` and `until` as people write them (15m, today, an RFC 3339 time) in the stored form."""
    from checkpoint.audit.moments import since as _since

    for name in ("since", "until"):
        if name in filters:
            try:
                filters[name] = _since(filters[name])
            except Exception as exc:  # noqa: BLE001 - argparse's type error, whatever its class
                raise BadRequest(f"{name}: {exc}") from None
    return filters


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
