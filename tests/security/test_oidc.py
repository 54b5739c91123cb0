"""OIDC identity tokens for approvers and auditors: the attacker's tokens, each refused.

The JWKS is served over real HTTP on loopback from a thread (oidc_helpers.JwksServer); the
checkpoint is a real gRPC server, the audit page's gate the one `warden audit serve` uses.
"""

from __future__ import annotations

import time

import grpc
import pytest
from server.helpers import rpc_error

from checkpoint.audit.web.access import Gate
from warden.auth import AuthPolicy
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.oidc import JwksCache, OidcConfigError, OidcSettings, OidcVerifier

from .oidc_helpers import AUDIENCE, ISSUER, JwksServer, Provider, forged


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def provider():
    return Provider()


@pytest.fixture
def idp(provider):
    server = JwksServer(provider)
    yield server
    server.stop()


def verifier(jwks: str, clock=None, **settings) -> OidcVerifier:
    chosen = OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks=jwks, **settings)
    return OidcVerifier(chosen, jwks=JwksCache(chosen, clock=clock or Clock()))


def test_a_token_of_the_provider_is_the_person_with_the_approver_and_auditor_roles(idp, provider):
    v = verifier(idp.url)
    for kid in ("rsa-1", "ec-1"):
        got = v.credential(provider.token("bob", kid=kid))
        assert got is not None and got.identity == "oidc:bob" and got.roles == ("approver", "auditor")
    assert idp.fetches == 1  # the JWKS is cached


def test_the_name_comes_from_the_configured_claim_and_must_be_a_plain_name(idp, provider):
    v = verifier(idp.url, name_claim="email")
    assert v.credential(provider.token("x", email="bob@example.com")).identity == "oidc:bob@example.com"
    for bad in ("token:driver", "bob smith", "*", "", "a" * 129):
        assert v.credential(provider.token("x", email=bad)) is None, bad
    assert v.credential(provider.token("x")) is None  # no email claim at all
    assert verifier(idp.url).credential(provider.token("driver:x")) is None


@pytest.mark.parametrize("claims", [
    {"iss": "https://evil.example.com"},
    {"iss": ISSUER + "/"},  # another spelling of the issuer
    {"iss": None},
    {"aud": "another-service"},
    {"aud": ["another-service", "warden-x"]},
    {"aud": None},
    {"exp": int(time.time()) - 3600},  # expired
    {"exp": None},  # never expires: refused, not taken
    {"nbf": int(time.time()) + 3600},  # not yet valid
    {"iat": int(time.time()) + 3600},  # issued in the future
], ids=["issuer", "issuer-slash", "no-issuer", "audience", "audience-list", "no-audience", "expired",
        "no-expiry", "not-yet-valid", "issued-later"])
def test_wrong_claims_are_refused(idp, provider, claims):
    assert verifier(idp.url).credential(provider.token("bob", **claims)) is None


def test_an_audience_list_naming_warden_is_taken(idp, provider):
    assert verifier(idp.url).credential(provider.token("bob", aud=["other", AUDIENCE])) is not None


def test_alg_none_and_hmac_with_the_public_key_as_secret_are_refused(idp, provider):
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "bob", "exp": int(time.time()) + 600}
    v = verifier(idp.url)
    assert v.credential(forged({"alg": "none", "kid": "rsa-1"}, claims, None)) is None
    assert v.credential(forged({"alg": "none"}, claims, None)) is None
    # algorithm confusion: the RSA public key (PEM, and the JWKS's own modulus bytes) as an HMAC secret
    for secret in (provider.public_pem(), provider.public_pem().strip()):
        assert v.credential(forged({"alg": "HS256", "kid": "rsa-1", "typ": "JWT"}, claims, secret)) is None
    # an RS256 key asked to verify ES256 (and the other way round): the key decides the algorithm
    ec_signed = provider.token("bob", kid="ec-1")
    header, body, sig = ec_signed.split(".")
    relabelled = forged({"alg": "ES256", "kid": "rsa-1"}, claims, None).split(".")[0]
    assert v.credential(f"{relabelled}.{body}.{sig}") is None


def test_an_unknown_kid_and_a_token_signed_by_another_key_are_refused(idp, provider):
    v = verifier(idp.url)
    stranger = Provider()
    assert v.credential(provider.token("bob", kid="rsa-9", key=stranger.keys["rsa-1"])) is None
    # the provider's kid, someone else's key
    assert v.credential(provider.token("bob", kid="rsa-1", key=stranger.keys["rsa-1"])) is None
    assert v.credential(provider.token("bob", kid="ec-1", key=stranger.keys["ec-1"])) is None
    # a tampered body keeps the signature of another
    good = provider.token("bob").split(".")
    other = provider.token("alice").split(".")
    assert v.credential(f"{good[0]}.{other[1]}.{good[2]}") is None
    # with no kid and two keys published, no key is guessed
    assert v.credential(forged({"alg": "RS256"}, {"sub": "bob"}, None)) is None


def test_a_rotated_in_key_is_fetched_and_unknown_kids_do_not_flood_the_provider(idp, provider):
    clock = Clock()
    v = verifier(idp.url, clock=clock)
    assert v.credential(provider.token("bob")) is not None and idp.fetches == 1
    # kids the JWKS does not hold: the keys were just fetched, so none is fetched again ...
    for n in range(5):
        assert v.credential(provider.token("bob", kid=f"made-up-{n}", key=provider.keys["rsa-1"])) is None
    assert idp.fetches == 1
    clock.now += 31  # ... and once min_refetch passed, one fetch for all of them
    for n in range(5):
        assert v.credential(provider.token("bob", kid=f"made-up-{n}", key=provider.keys["rsa-1"])) is None
    assert idp.fetches == 2
    provider.keys["rsa-2"] = provider.keys.pop("rsa-1")
    provider.published = {"rsa-2", "ec-1"}
    clock.now += 31
    assert v.credential(provider.token("bob", kid="rsa-2")) is not None  # rotated in: fetched once more
    assert idp.fetches == 3


def test_an_unreachable_jwks_keeps_cached_keys_and_refuses_the_rest(idp, provider):
    clock = Clock()
    v = verifier(idp.url, clock=clock)
    assert v.credential(provider.token("bob")) is not None
    idp.stop()
    clock.now += 10_000  # the cache is stale and the provider is gone
    assert v.credential(provider.token("bob")) is not None  # a cached key fits
    provider.keys["rsa-3"] = provider.keys["rsa-1"]
    assert v.credential(provider.token("bob", kid="rsa-3")) is None  # no cached key fits: closed
    fresh = verifier(idp.url)
    assert fresh.credential(provider.token("bob")) is None  # never fetched: nothing verifies


def test_a_jwks_file_is_read_and_followed(tmp_path, provider):
    import json
    import os

    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(provider.jwks()))
    v = verifier(str(path))
    assert v.credential(provider.token("bob")) is not None
    provider.published = {"ec-1"}  # the provider retired rsa-1: the file is rewritten
    path.write_text(json.dumps(provider.jwks()) + " ")
    assert v.credential(provider.token("bob")) is None
    assert v.credential(provider.token("bob", kid="ec-1")) is not None
    os.chmod(path, 0o666)  # another user could swap the keys: nobody signs in with them
    assert v.credential(provider.token("bob", kid="ec-1")) is None


def test_role_claims_map_to_approver_or_auditor_only(idp, provider):
    v = verifier(idp.url, roles_claim="groups", role_map={"warden-approvers": "approver", "warden-audit": "auditor"})
    assert v.credential(provider.token("bob", groups=["staff", "warden-audit"])).roles == ("auditor",)
    assert v.credential(provider.token("bob", groups="warden-approvers")).roles == ("approver",)
    assert v.credential(provider.token("bob", groups=["staff"])) is None
    assert v.credential(provider.token("bob", groups={"warden-audit": True})) is None
    assert v.credential(provider.token("bob")) is None
    with pytest.raises(OidcConfigError, match="approver or auditor"):
        OidcSettings(ISSUER, AUDIENCE, idp.url, roles_claim="groups", role_map={"x": "admin"})
    with pytest.raises(OidcConfigError, match="https"):
        OidcSettings(ISSUER, AUDIENCE, "http://idp.example.com/jwks")


# -- at the checkpoint, over gRPC --------------------------------------------------------------------


@pytest.fixture
def cp(start, idp, policy_dir):
    import hashlib

    from server.conftest import TOKEN

    oidc = verifier(idp.url)
    # mallory is a person of the people principal (oidc:*) whom no tenant role names
    return start(auth=AuthPolicy(tokens={hashlib.sha256(TOKEN.encode()).digest(): "driver"}, oidc=oidc))


def _waiting_call(cp) -> tuple[pb.StartRunResponse, str]:
    run = cp.start_run("recon", person="alice")
    assert run.run_token, run.decision
    req = pb.CheckRequest(run=pb.RunContext(run_token=run.run_token),
                          tool_call=pb.ToolCall(tool="create_task_from_template"))
    req.tool_call.arguments.update({"template": "web", "target": "10.20.0.0/24"})
    asked = cp.stub().Check(req, timeout=5)
    assert asked.verdict == pb.VERDICT_REQUIRE_APPROVAL, asked
    return run, asked.decision_id


def test_an_approver_approves_with_an_identity_token(cp, provider):
    run, asked = _waiting_call(cp)
    got = cp.stub(provider.token("bob")).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked), timeout=5)
    assert got.decision.code == "approved" and got.approval_token
    record = cp.records()[-1]
    assert (record["caller"], record["principal"], record["action"]) == ("bob", "people", "approval")


def test_a_claim_the_policy_does_not_back_is_refused_on_the_record(cp, provider):
    run, asked = _waiting_call(cp)
    # the token says approver; acme's roles do not name mallory
    got = cp.stub(provider.token("mallory")).Approve(pb.ApproveRequest(run_id=run.run_id, decision_id=asked),
                                                     timeout=5)
    assert got.decision.code == "role_required" and not got.approval_token
    assert cp.records()[-1]["caller"] == "mallory"


@pytest.mark.parametrize("bad", ["expired", "issuer", "stranger"])
def test_a_bad_identity_token_is_unauthenticated_and_recorded(cp, provider, bad):
    token = {"expired": provider.token("bob", exp=int(time.time()) - 3600),
             "issuer": provider.token("bob", iss="https://evil.example.com"),
             "stranger": provider.token("bob", key=Provider().keys["rsa-1"])}[bad]
    run, asked = _waiting_call(cp)
    code, detail = rpc_error(cp.stub(token).Approve, pb.ApproveRequest(run_id=run.run_id, decision_id=asked))
    assert code == grpc.StatusCode.UNAUTHENTICATED and detail.code == "unauthenticated"
    assert cp.records()[-1]["code"] == "unauthenticated"


def test_an_identity_token_does_not_ask_decisions_or_start_runs(cp, provider):
    token = provider.token("alice")  # alice is acme's admin, and the people principal may check as self
    code, _ = rpc_error(cp.stub(token).StartRun, pb.StartRunRequest(person="alice", mode=pb.RUN_MODE_INTERACTIVE))
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert cp.records()[-1]["code"] == "unauthenticated"
    assert cp.stub(token).Roles(pb.RolesRequest(person="alice"), timeout=5) is not None  # reads are open


# -- on the audit page -------------------------------------------------------------------------------


def test_the_audit_page_takes_an_auditors_identity_token(policy_dir, idp, provider):
    gate = Gate(None, policy_dir, oidc=verifier(idp.url))
    carol = gate.authenticate(f"Bearer {provider.token('carol')}")
    assert carol is not None and (carol.caller, carol.principal, carol.tenants) == ("carol", "people", ["acme"])
    assert gate.authenticate(f"Bearer {provider.token('carol', aud='other')}") is None
    assert gate.authenticate(f"Bearer {forged({'alg': 'none'}, {'sub': 'carol'}, None)}") is None
    approvers_only = Gate(None, policy_dir, oidc=verifier(idp.url, roles_claim="groups",
                                                          role_map={"warden-approvers": "approver"}))
    assert approvers_only.authenticate(f"Bearer {provider.token('carol', groups=['warden-approvers'])}") is None


@pytest.mark.parametrize(("flags", "said"), [
    (["--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-jwks", "http://idp.example.com/jwks"], "https"),
    (["--oidc-issuer", ISSUER, "--oidc-jwks", "https://idp.example.com/jwks"], "audience"),
    (["--oidc-role", "warden-approvers=approver"], "without --oidc-issuer"),
    (["--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE, "--oidc-jwks", "https://idp.example.com/jwks",
      "--oidc-roles-claim", "groups", "--oidc-role", "warden-admins=admin"], "approver or auditor"),
])
def test_serve_refuses_oidc_settings_that_cannot_work(tmp_path, capsys, flags, said):
    from warden.cli import main

    data = tmp_path / "data"
    assert main(["keys", "init", "--data", str(data)]) == 0
    capsys.readouterr()
    assert main(["checkpoint", "serve", "--data", str(data), "--address", "127.0.0.1:0", "--socket", "",
                 "--workers", "1", "--pin-cpus", "off", *flags]) == 2
    assert said in capsys.readouterr().err
    assert not (data / "decisions.db").exists()  # nothing started
