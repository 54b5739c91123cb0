"""The page's HTTP server on the wire: one request is one request, whatever its framing, and a
request past the limits is refused without reading it. Raw sockets against the real server; each
test closes its sending half and reads to the end, so it waits for the server, not for a clock."""

from __future__ import annotations

import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .world import TOKENS

INNER = (f"GET /api/me HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer {TOKENS['carol']}\r\n\r\n").encode()


def _exchange(url: str, data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """Send `data`, close the sending half, and parse every answer until the server closes."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        try:
            conn.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server refused early and closed: its answer is still there to read
        try:
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        received = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
    answers = []
    while received:
        head, sep, rest = received.partition(b"\r\n\r\n")
        assert sep, received[:200]
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        answers.append((status, headers, rest[:length]))
        received = rest[length:]
    return answers


def _chunked(body: bytes) -> bytes:
    return f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"


FRAMINGS = {
    "content-length": lambda method: (f"{method} /app.css HTTP/1.1\r\nHost: a\r\nContent-Length: {len(INNER)}\r\n"
                                      "\r\n").encode() + INNER,
    "chunked": lambda method: f"{method} /app.css HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    + _chunked(INNER),
    "both": lambda method: (f"{method} /app.css HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n").encode() + _chunked(INNER),
    "two lengths": lambda method: (f"{method} /app.css HTTP/1.1\r\nHost: a\r\nContent-Length: {len(INNER)}\r\n"
                                   f"Content-Length: 0\r\n\r\n").encode() + INNER,
}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
def test_a_body_is_never_read_as_a_second_request(shared_world, framing, method):
    """A front proxy that forwards this as one request must see one answer: the body, however it is
    framed, is taken as the body (or the request refused), never answered as a request of its own."""
    answers = _exchange(shared_world.web.url, FRAMINGS[framing](method))
    assert len(answers) == 1, [(s, b[:80]) for s, _h, b in answers]
    assert b"caller" not in answers[0][2]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pad=st.binary(max_size=64), extra=st.sampled_from(["", "X-A: 1\r\n", "Connection: keep-alive\r\n"]))
def test_a_get_with_any_body_is_refused_and_its_connection_closed_unread(shared_world, pad, extra):
    """Whatever the body holds, and whatever follows on the connection, one answer: a refusal."""
    body = pad + INNER
    data = (f"GET /app.css HTTP/1.1\r\nHost: a\r\n{extra}Content-Length: {len(body)}\r\n\r\n").encode() + body
    answers = _exchange(shared_world.web.url, data + b"GET /app.js HTTP/1.1\r\nHost: a\r\n\r\n")
    assert [status for status, _h, _b in answers] == [400]


SPELLINGS = {
    "folded content-length": "Content-Length: 0\r\n {n}\r\n",
    "space before the colon": "Content-Length : {n}\r\n",
    "two content-lengths": "Content-Length: {n}\r\nContent-Length: 0\r\n",
    "content-length and chunked": "Content-Length: {n}\r\nTransfer-Encoding: chunked\r\n",
    "chunked, upper case": "Transfer-Encoding: CHUNKED\r\n",
    "chunked after identity": "Transfer-Encoding: identity, chunked\r\n",
    "two transfer-encodings": "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    "tab in the name": "Content-Length\t: {n}\r\n",
    "plus sign": "Content-Length: +{n}\r\n",
}


@pytest.mark.parametrize("spelling", sorted(SPELLINGS))
def test_no_spelling_of_a_body_gets_the_body_answered_as_a_request(shared_world, spelling):
    header = SPELLINGS[spelling].format(n=len(INNER))
    body = _chunked(INNER) if "chunked" in spelling.lower() else INNER
    data = f"GET /app.css HTTP/1.1\r\nHost: a\r\n{header}\r\n".encode() + body
    answers = _exchange(shared_world.web.url, data)
    assert len(answers) == 1 and answers[0][0] >= 400, [(s, b[:80]) for s, _h, b in answers]


def test_a_keep_alive_connection_still_serves_requests_in_turn(shared_world):
    one = b"GET /app.css HTTP/1.1\r\nHost: a\r\n\r\n"
    answers = _exchange(shared_world.web.url, one + INNER)
    assert [status for status, _h, _b in answers] == [200, 200]
    assert b"carol" in answers[1][2]


def test_headers_past_the_limit_are_refused_and_the_server_serves_on(shared_world):
    big = "X-Pad: " + "a" * 40_000 + "\r\n"
    answers = _exchange(shared_world.web.url, f"GET /app.css HTTP/1.1\r\nHost: a\r\n{big}\r\n".encode())
    assert len(answers) == 1 and answers[0][0] in (400, 413, 431), answers[0][:2]
    many = "".join(f"X-{n}: v\r\n" for n in range(2000))
    answers = _exchange(shared_world.web.url, f"GET /app.css HTTP/1.1\r\nHost: a\r\n{many}\r\n".encode())
    assert len(answers) == 1 and answers[0][0] in (400, 413, 431), answers[0][:2]
    assert shared_world.web.get("/app.css")[0] == 200


def test_a_body_past_the_limit_is_refused_before_it_is_read(shared_world):
    """10 MiB declared and never sent: the answer comes without the server waiting for it."""
    answers = _exchange(shared_world.web.url,
                        b"GET /app.css HTTP/1.1\r\nHost: a\r\nContent-Length: 10485760\r\n\r\n")
    assert [status for status, _h, _b in answers] == [413]


def test_the_server_names_no_library_or_version(shared_world):
    _status, headers, _body = shared_world.web.get("/app.css")
    assert headers.get("Server") == "warden-audit"


def test_https_serves_the_page_and_refuses_plain_http(shared_world, tmp_path):
    import datetime
    import ipaddress
    import ssl
    import threading
    import urllib.request

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    from checkpoint.audit.web.server import make_server

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    key_file.chmod(0o600)
    web = shared_world.web.server
    server = make_server("127.0.0.1", 0, web.gate, web.views)
    server.use_tls(str(cert_file), str(key_file))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        context = ssl.create_default_context(cafile=str(cert_file))
        request = urllib.request.Request(f"https://127.0.0.1:{server.port}/api/me",
                                         headers={"Authorization": f"Bearer {TOKENS['carol']}"})
        with urllib.request.urlopen(request, context=context, timeout=30) as answer:
            assert answer.status == 200 and b"carol" in answer.read()
        answers = _exchange(f"http://127.0.0.1:{server.port}", b"GET /api/me HTTP/1.1\r\nHost: a\r\n\r\n")
        assert all(b"carol" not in body for _s, _h, body in answers)
    finally:
        server.shutdown()
        thread.join(timeout=30)
