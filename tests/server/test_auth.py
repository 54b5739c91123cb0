"""Caller authentication: bearer tokens on TCP, file permissions on the socket, mTLS."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from checkpoint.audit import DecisionReader
from checkpoint.server import AuthPolicy, TlsConfig, create_server, load_tokens
from warden.auth import TokenFileError
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc
from warden.grants import SigningKey

from .helpers import rpc_error, tool_call


def _check(stub, version: str):
    """Start a run and make one call in it, both over `stub` (one caller, one principal)."""
    started = stub.StartRun(
        pb.StartRunRequest(person="alice", agent="recon", mode=pb.RUN_MODE_INTERACTIVE), timeout=5
    )
    assert started.decision.verdict == pb.VERDICT_ALLOW, started.decision
    assert started.agent.agent_version == version
    req = tool_call("recon", version, "get_task", {"task_id": "task-1"})
    req.run.CopyFrom(pb.RunContext(run_token=started.run_token))
    return stub.Check(req, timeout=5)


@pytest.mark.parametrize("token", [None, "wrong-token-0123456789"])
def test_tcp_without_a_valid_token_is_refused_and_recorded(checkpoint, token):
    stub = checkpoint.stub(token=token)
    req = tool_call("recon", checkpoint.version("recon"), "get_task", {"task_id": "task-1"})
    code, detail = rpc_error(stub.Check, req)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert detail is not None and detail.code == "unauthenticated"
    [record] = checkpoint.records()
    assert (
        record["code"] == "unauthenticated" and record["verdict"] == "DENY" and record["tool"] == "get_task"
    )
    code, _ = rpc_error(stub.ResolveAgent, pb.ResolveAgentRequest(agent="recon"))
    assert code == grpc.StatusCode.UNAUTHENTICATED


def test_tcp_with_token_is_served(checkpoint):
    assert _check(checkpoint.stub(), checkpoint.version("recon")).verdict == pb.VERDICT_ALLOW
    assert checkpoint.records()[-1]["caller"] == "driver"


def test_unix_socket_needs_no_token_and_is_owner_only(checkpoint):
    mode = stat.S_IMODE(os.stat(checkpoint.server.uds_path).st_mode)
    assert mode == 0o600
    stub = pb_grpc.CheckpointServiceStub(checkpoint.uds())
    assert _check(stub, checkpoint.version("recon")).verdict == pb.VERDICT_ALLOW
    record = checkpoint.records()[-1]
    assert (record["caller"], record["principal"]) == ("unix", "driver")


def test_socket_mode_0660(start):
    running = start(uds_mode=0o660)
    assert stat.S_IMODE(os.stat(running.server.uds_path).st_mode) == 0o660


def test_tcp_without_any_auth_configured_refuses_to_start(tmp_path, policy_dir):
    with pytest.raises(ValueError, match="authentication"):
        create_server(
            "127.0.0.1:0", policy_dir=policy_dir, data_dir=tmp_path / "d", key=SigningKey.generate()
        )


def test_token_file_format_and_permissions(tmp_path: Path):
    path = tmp_path / "tokens"
    path.write_text("# comment\ndriver abcdefghijklmnopqrstuvwxyz\nzyxwvutsrqponmlkjihgfedcba\n")
    path.chmod(0o600)
    assert sorted(load_tokens(path).values()) == ["driver", "token-3"]
    path.chmod(0o604)
    with pytest.raises(TokenFileError, match="chmod 600"):
        load_tokens(path)
    path.chmod(0o600)
    path.write_text("driver short\n")
    with pytest.raises(TokenFileError, match=":1:"):
        load_tokens(path)


def _cert(name: str, issuer_key, issuer_name, key, *, ca: bool) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj) -> bytes:
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM)
    return obj.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


MTLS_PRINCIPAL = """kind: Principal
name: mtls-driver
description: a driver that authenticates with its client certificate (the test's)
identities: ["mtls:localhost"]
check:
  tenants: ["*"]
  agents: ["*"]
  persons: any
"""


def test_mtls_client_certificate_is_required(tmp_path, policy_dir):
    # a verified certificate is the identity `mtls:<its first identity>` (here its DNS name)
    (policy_dir / "principals" / "mtls-driver.yaml").write_text(MTLS_PRINCIPAL)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = _cert("test-ca", ca_key, ca_name, ca_key, ca=True)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    server_cert = _cert("localhost", ca_key, ca_name, server_key, ca=False)
    client_cert = _cert("driver", ca_key, ca_name, client_key, ca=False)
    for name, obj in [("ca.pem", ca), ("server.pem", server_cert), ("server.key", server_key)]:
        (tmp_path / name).write_bytes(_pem(obj))
    tls = TlsConfig(tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "ca.pem")
    server, port = create_server(
        "localhost:0", policy_dir=policy_dir, data_dir=tmp_path / "d", key=SigningKey.generate(),
        auth=AuthPolicy(mtls=True), tls=tls, watch_interval=None,
    )  # fmt: skip
    server.start()
    try:
        version = server.store.current.agents["recon"].version
        req = tool_call("recon", version, "get_task", {"task_id": "task-1"})
        good = grpc.secure_channel(
            f"localhost:{port}", grpc.ssl_channel_credentials(_pem(ca), _pem(client_key), _pem(client_cert))
        )
        assert _check(pb_grpc.CheckpointServiceStub(good), version).verdict == pb.VERDICT_ALLOW
        record = list(DecisionReader(tmp_path / "d" / "decisions.db").read())[-1]
        assert (record["caller"], record["principal"]) == ("mtls:localhost", "mtls-driver")
        anonymous = grpc.secure_channel(f"localhost:{port}", grpc.ssl_channel_credentials(_pem(ca)))
        with pytest.raises(grpc.RpcError) as exc:
            pb_grpc.CheckpointServiceStub(anonymous).Check(req, timeout=5)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE  # the handshake itself fails
        good.close()
        anonymous.close()
    finally:
        server.stop(grace=0.5)
