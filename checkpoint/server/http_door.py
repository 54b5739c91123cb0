"""The HTTP door: the checkpoint's contracts as JSON over HTTP (the Connect protocol), beside gRPC,
in the same process (`serve --http-address HOST:PORT`; docs/checkpoint-service.md, "HTTP and JSON").

    POST /warden.checkpoint.v1.CheckpointService/Check
    Content-Type: application/json            (or application/proto)
    Authorization: Bearer TOKEN               (or a client certificate, where mTLS is configured)

Every unary method is served, and WatchDecisions as a Connect server stream
(`application/connect+json`); CheckStream (a client stream) is gRPC's only. Each call goes through
the handler the gRPC door uses (connect_wire.py says how), so it is authenticated, drained,
decided, recorded before its answer and refused with the same stable codes. The door's own
refusals, made before any handler runs and so before anything is decided, are: a method it does
not serve (`unknown_method`), a body larger than `--max-request-bytes` or of no declared length
(`request_too_large`, `length_required`), a content type other than JSON or binary protobuf
(`unsupported_media_type`), and more calls at once than the door's threads (`too_many_requests`);
beyond four open connections per thread, a new connection is closed unanswered.

Why not the `connectrpc` package: it runs on another protobuf runtime (protobuf-py) than the one
the stubs are generated for, needs a WSGI/ASGI server and a code generator of its own, and its
handlers would be a second path for authentication and records. The door is the standard library's
threading HTTP server, one thread per call as gRPC's pool, capped at the same count.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc

from checkpoint.server import connect_wire as wire
from checkpoint.server.servicers.handling import SERVICE_NAME
from warden import codes
from warden.private import read_trusted

log = logging.getLogger("warden.checkpoint.http")

PREFIX = f"/{SERVICE_NAME}/"
# a client that sends its headers or body slower than this loses its connection (a thread each)
READ_TIMEOUT_SECONDS = 30.0
# connections held open at once (each a thread, idle ones for up to READ_TIMEOUT_SECONDS), per call slot
CONNECTIONS_PER_CALL = 4
_UNARY_TYPES = {wire.JSON, wire.PROTO}
_STREAM_TYPES = {wire.STREAM_JSON, wire.STREAM_PROTO}


class HttpDoor:
    """A bound HTTP listener for the checkpoint's methods; `start()`, then `stop()`."""

    def __init__(self, address: str, handlers: dict[str, grpc.RpcMethodHandler], *, max_request_bytes: int,
                 max_calls: int, tls: Any = None, shared: bool = False):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--http-address must be HOST:PORT, not {address!r}")
        host = host.strip("[]")
        self._server = _Server((host, int(port)), _Handler, shared=shared,
                               family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self._server.door = self
        self.handlers = handlers
        self.max_request_bytes = max_request_bytes
        self.calls = threading.BoundedSemaphore(max_calls)
        self.connections = threading.BoundedSemaphore(max_calls * CONNECTIONS_PER_CALL)
        self.tls = _tls_context(tls) if tls is not None else None
        self.port: int = self._server.server_address[1]
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="checkpoint-http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """No new connections; the calls in flight were let finish by the drain before this."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    door: HttpDoor

    def __init__(self, address: tuple[str, int], handler: Any, *, shared: bool, family: int):
        self.address_family = family
        # workers of one checkpoint share the port, as on gRPC; otherwise a second bind fails
        self.allow_reuse_port = shared
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        # more connections than the door holds: this one is closed at once, and no thread is started
        if not self.door.connections.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.door.connections.release()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # runs on the connection's own thread: a slow TLS handshake holds no one else up
        request.settimeout(READ_TIMEOUT_SECONDS)
        if self.door.tls is not None:
            try:
                request = self.door.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError) as exc:  # no certificate, or one the CA did not sign
                log.info("http: TLS handshake refused from %s: %s", client_address[0], exc)
                return
        super().finish_request(request, client_address)


def _tls_context(tls: Any) -> ssl.SSLContext:
    """mTLS as the gRPC door has it: the server's certificate, and client certificates required and
    checked against the configured CA. The files are read as files warden trusts (warden/private.py)."""
    read_trusted(tls.key, "TLS private key")
    read_trusted(tls.cert, "TLS certificate")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(str(tls.cert), str(tls.key))
    context.load_verify_locations(cadata=read_trusted(tls.client_ca, "client CA certificate").decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def _identities(connection: Any) -> list[bytes] | None:
    """The verified client certificate's identities as gRPC names them: its subject alternative
    names, in order, else its common name."""
    if not isinstance(connection, ssl.SSLSocket):
        return None
    cert: dict[str, Any] = dict(connection.getpeercert() or {})
    if not cert:
        return None
    alt_names: tuple[tuple[str, str], ...] = cert.get("subjectAltName", ())
    names = [value.encode() for kind, value in alt_names if kind in ("DNS", "URI", "email", "IP Address")]
    if names:
        return names
    subject: tuple[tuple[tuple[str, str], ...], ...] = cert.get("subject", ())
    return [value.encode() for rdn in subject for key, value in rdn if key == "commonName"][:1] or None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every answer carries its length
    # headers and body are two writes: with Nagle's algorithm the body waits for the client's
    # delayed ACK of the headers, 40 ms a call on Linux
    disable_nagle_algorithm = True
    server: _Server
    server_version = "warden-checkpoint"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("http: %s " + format, self.client_address[0], *args)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._refuse(wire.door_error(grpc.StatusCode.UNIMPLEMENTED, codes.UNKNOWN_METHOD,
                                     "the checkpoint's methods are called with POST"))

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        self._body_read = False
        door = self.server.door
        name = self.path.split("?", 1)[0].removeprefix(PREFIX) if self.path.startswith(PREFIX) else ""
        handler = door.handlers.get(name)
        if handler is None or handler.stream_stream is not None or handler.stream_unary is not None:
            self._refuse(wire.door_error(grpc.StatusCode.UNIMPLEMENTED, codes.UNKNOWN_METHOD, (
                f"no method {self.path!r} here: POST {PREFIX}METHOD for a method of the checkpoint's "
                "contracts (CheckStream is served over gRPC only)")))
            return
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        streaming = handler.unary_stream is not None
        if content_type not in (_STREAM_TYPES if streaming else _UNARY_TYPES):
            wanted = "application/connect+json or application/connect+proto" if streaming else \
                "application/json or application/proto"
            self._refuse(wire.door_error(grpc.StatusCode.INVALID_ARGUMENT, codes.UNSUPPORTED_MEDIA_TYPE,
                                         f"the body of {name} is {wanted}, not {content_type or 'undeclared'}"), 415)
            return
        body = self._read_body(door.max_request_bytes)
        if body is None:
            return
        if streaming:
            body = self._unwrap(body)
            if body is None:
                return
        if not door.calls.acquire(blocking=False):
            self._refuse(wire.door_error(grpc.StatusCode.UNAVAILABLE, codes.TOO_MANY_REQUESTS,
                                         "the checkpoint's HTTP door is at its limit of calls at once; retry"))
            return
        try:
            request = wire.decoder(_request_class(handler), content_type)(body)
            context = wire.DoorContext(self._peer(), _identities(self.connection),
                                       [(k.lower(), v) for k, v in self.headers.items()])
            if streaming:
                self._stream(handler, request, context, content_type)
            else:
                self._unary(handler, request, context, content_type)
        finally:
            door.calls.release()

    def _unary(self, handler: grpc.RpcMethodHandler, request: Any, context: wire.DoorContext, content_type: str) -> None:
        try:
            response = handler.unary_unary(request, context)
        except wire.Aborted as aborted:
            self._refuse(wire.from_aborted(aborted))
            return
        self._send(200, content_type, wire.encode(response, content_type))

    def _stream(self, handler: grpc.RpcMethodHandler, request: Any, context: wire.DoorContext,
                content_type: str) -> None:
        """A Connect server stream: 200 at once, then each message enveloped, then the end of the stream
        with its error, if any. The connection closes after it (no length is known in advance)."""
        self.close_connection = True
        started = False
        error: wire.DoorError | None = None
        ended = threading.Event()
        if not isinstance(self.connection, ssl.SSLSocket):  # TLS: one thread may use the connection, the writer
            threading.Thread(target=_hang_up_watch, args=(self.connection, context, ended), daemon=True,
                             name="checkpoint-http-stream").start()
        try:
            for message in handler.unary_stream(request, context):
                if not started:
                    self._start_stream(content_type)
                    started = True
                self.wfile.write(wire.envelope(wire.encode(message, content_type)))
                self.wfile.flush()
        except wire.Aborted as aborted:
            error = wire.from_aborted(aborted)
        except OSError:  # the client went away: the handler hears it through its callbacks
            return
        finally:
            ended.set()
            context.done()
        try:
            if not started:
                self._start_stream(content_type)
            self.wfile.write(wire.end_of_stream(error))
            self.wfile.flush()
        except OSError:
            pass

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Connection", "close")
        self.end_headers()

    def _read_body(self, limit: int) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or self.headers.get("Content-Length") is None:
            self._refuse(wire.door_error(grpc.StatusCode.INVALID_ARGUMENT, codes.LENGTH_REQUIRED,
                                         "the request must declare its Content-Length"), 411)
            return None
        try:
            length = int(self.headers["Content-Length"])
        except ValueError:
            length = -1
        if length < 0:
            self._refuse(wire.door_error(grpc.StatusCode.INVALID_ARGUMENT, codes.LENGTH_REQUIRED,
                                         "the request's Content-Length is not a length"), 411)
            return None
        if length > limit:
            # refused unread, as gRPC refuses a message over its limit: nothing decided, nothing recorded
            self._refuse(wire.door_error(grpc.StatusCode.RESOURCE_EXHAUSTED, codes.REQUEST_TOO_LARGE,
                                         f"the request has {length} bytes; at most {limit} are taken"), 413)
            return None
        try:
            body = self.rfile.read(length)
        except OSError:
            self.close_connection = True
            return None
        self._body_read = len(body) == length
        return body

    def _unwrap(self, body: bytes) -> bytes | None:
        """A stream's one request is enveloped as its answers are."""
        if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            self._refuse(wire.door_error(grpc.StatusCode.INVALID_ARGUMENT, codes.INVALID_REQUEST,
                                         "a stream's request is one Connect envelope: flags 0, length, message"))
            return None
        return body[5:]

    def _peer(self) -> str:
        host, port = self.client_address[0], self.client_address[1]
        # as grpcio names a peer, so the refusal limiter counts one client the same on both doors
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def _refuse(self, error: wire.DoorError, http_status: int | None = None) -> None:
        if not getattr(self, "_body_read", False):  # what is left unread must not be taken for the next request
            self.close_connection = True
        self._send(http_status or error.http_status, wire.JSON, error.encoded())

    def _send(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _hang_up_watch(connection: Any, context: wire.DoorContext, ended: threading.Event) -> None:
    """Tell a stream's handler when its client hangs up, as gRPC does, so a stream nobody reads stops
    following the log and frees its place at once (a client sends nothing after a stream's request).
    Over TLS the stream learns it at its next write instead: OpenSSL's connection is not shared
    between a reading and a writing thread."""
    while not ended.is_set():
        try:
            readable, _, _ = select.select([connection], [], [], 1.0)
            if readable and not connection.recv(1, socket.MSG_PEEK):
                break
        except (OSError, ValueError):  # closed under us
            break
        if readable:  # bytes after the request: nothing a stream reads; stop looking, keep serving
            return
    if not ended.is_set():
        context.done()


def _request_class(handler: grpc.RpcMethodHandler) -> Any:
    """The request message class behind a handler's deserializer (servicers/handling.parser)."""
    return handler.request_deserializer.message_class  # type: ignore[union-attr]
