"""An identity provider for tests: key pairs, a JWKS served over real HTTP on loopback from a
thread, and identity tokens signed (or forged) the ways an attacker would."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

ISSUER = "https://idp.example.com"
AUDIENCE = "warden"


class Provider:
    """Signing keys by kid and the JWKS that publishes their public halves."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {
            "rsa-1": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec-1": ec.generate_private_key(ec.SECP256R1()),
        }
        self.published = set(self.keys)

    def jwks(self) -> dict[str, Any]:
        found = []
        for kid in sorted(self.published):
            key = self.keys[kid]
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "RS256"
            else:
                jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
                jwk["alg"] = "ES256"
            jwk.update(kid=kid, use="sig")
            found.append(jwk)
        return {"keys": found}

    def public_pem(self, kid: str = "rsa-1") -> bytes:
        return self.keys[kid].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def token(self, name: str = "bob", *, kid: str = "rsa-1", key: Any = None, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": name, "iat": now, "exp": now + 600, **claims}
        body = {k: v for k, v in body.items() if v is not None}
        signer = key or self.keys[kid]
        alg = "RS256" if isinstance(signer, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(body, signer, algorithm=alg, headers={"kid": kid})


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
    """A token built by hand: `alg: none` with an empty signature, or an HMAC under `secret`."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


class JwksServer:
    """The provider's JWKS at http://127.0.0.1:PORT/jwks, served by a thread; counts fetches."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.fetches = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                outer.fetches += 1
                body = json.dumps(outer.provider.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
