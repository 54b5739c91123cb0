"""`warden checkpoint serve --workers 2` as an operator runs it: a key added with `warden keys add`
is taken by every worker at its next call, and refused by every worker once revoked; an identity
token of the provider the --oidc-* flags name is taken too. No restart in between."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import grpc
import pytest

from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.checkpoint.v1 import checkpoint_pb2_grpc as pb_grpc

from .conftest import REPO
from .helpers import BearerAuth
from .test_workers import Cluster

ISSUER, AUDIENCE = "https://idp.example.com", "warden"


def _keys(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "warden.cli", "keys", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def _answers(cluster: Cluster, token: str, person: str = "bob", connections: int = 6) -> list[str]:
    """What each of `connections` fresh connections (spread over the workers by the kernel) gets."""
    got = []
    for _ in range(connections):
        channel = grpc.insecure_channel(f"127.0.0.1:{cluster.port}", options=[("grpc.use_local_subchannel_pool", 1)])
        cluster.channels.append(channel)
        stub = pb_grpc.CheckpointServiceStub(grpc.intercept_channel(channel, BearerAuth(token)))
        try:
            stub.Roles(pb.RolesRequest(person=person), timeout=10)  # people may ask about themselves
            got.append("ok")
        except grpc.RpcError as exc:
            got.append(exc.code().name)
    return got


@pytest.mark.timeout(300)
def test_keys_added_and_revoked_reach_every_worker_without_a_restart(tmp_path, policy_dir):
    from security.oidc_helpers import Provider

    provider = Provider()
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(provider.jwks()))
    flags = ("--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-jwks", str(jwks))
    cluster = Cluster(tmp_path, policy_dir, extra=flags)
    try:
        os.chmod(cluster.data / "checkpoint.tokens", 0o600)
        cluster.wait_serving()
        tokens = cluster.data / "checkpoint.tokens"
        added = _keys("add", "bob", "--kind", "person", "--tokens", str(tokens))
        assert added.returncode == 0, added.stderr
        bob = added.stdout.strip()
        assert set(_answers(cluster, bob)) == {"ok"}
        assert set(_answers(cluster, provider.token("carol"), "carol")) == {"ok"}
        assert set(_answers(cluster, provider.token("carol", aud="other"), "carol")) == {"UNAUTHENTICATED"}
        assert _keys("revoke", "bob", "--tokens", str(tokens)).returncode == 0
        assert set(_answers(cluster, bob)) == {"UNAUTHENTICATED"}
        listed = _keys("list", "--data", str(cluster.data)).stdout
        assert "bob" in listed and bob not in listed
    finally:
        assert cluster.stop() == 0
