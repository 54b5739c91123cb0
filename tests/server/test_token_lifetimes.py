"""Run and approval tokens live for a set time, are signed with an Ed25519 key named in the token,
and are verified with the public set alone; the key rotates under live runs with no restart, and
the shared-secret format of before is refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpoint.server import AuthPolicy
from warden import canonical, token_keys
from warden.checkpoint.v1 import checkpoint_pb2 as pb
from warden.grants import SigningKey
from warden.token_keys import load_public_pem
from warden.tokens import APPROVAL_LABEL, RUN_LABEL, TokenExpired, TokenInvalid, verify

from .conftest import PERSON_TOKEN, TOKEN


def call(token: str) -> pb.CheckRequest:
    req = pb.CheckRequest(run=pb.RunContext(run_token=token), tool_call=pb.ToolCall(tool="get_task"))
    req.tool_call.arguments.update({"task_id": "task-1"})
    return req


def started(running) -> pb.StartRunResponse:
    got = running.start_run("recon")
    assert got.run_token, got.decision
    return got


def claims(token: str) -> dict:
    payload = token.split(".")[2]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def at(running, when: datetime) -> None:
    running.server.service.clock = lambda: when


def published(running) -> dict:
    got = running.stub().TokenKeys(pb.TokenKeysRequest(), timeout=5)
    return {k.key_id: load_public_pem(k.public_key_pem) for k in got.keys}


def test_a_run_token_lives_its_lifetime_to_the_second_and_not_one_more(start):
    checkpoint = start(run_token_ttl=3600)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    at(checkpoint, now)
    run = started(checkpoint)
    issued = claims(run.run_token)
    assert issued["exp"] - issued["iat"] == 3600
    expires = datetime.fromtimestamp(issued["exp"], UTC)
    at(checkpoint, expires - timedelta(seconds=1))
    assert checkpoint.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW  # and memoised now
    at(checkpoint, expires)
    got = checkpoint.stub().Check(call(run.run_token), timeout=5)
    assert (got.verdict, got.code, got.rule) == (pb.VERDICT_DENY, "run_token_expired", "run_token")
    assert not got.HasField("grant")
    assert checkpoint.records()[-1]["code"] == "run_token_expired"
    act = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="resume", person="alice")
    assert checkpoint.stub().RecordAct(act, timeout=5).decision.code == "run_token_expired"


def test_an_approval_token_expires_and_is_refused_approval_expired(start, policy_dir):
    from security.test_approval_binding import approve, ask, subnet_call

    checkpoint = start(approval_token_ttl=600)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    at(checkpoint, now)
    run = checkpoint.start_run("recon")
    asked = ask(checkpoint, run)
    token = approve(checkpoint, run.run_id, asked).approval_token
    assert claims(token)["exp"] - claims(token)["iat"] == 600
    at(checkpoint, now + timedelta(seconds=600))
    got = checkpoint.stub().Check(subnet_call(run, asked, token), timeout=5)
    assert (got.verdict, got.code) == (pb.VERDICT_DENY, "approval_expired") and not got.HasField("grant")
    at(checkpoint, now + timedelta(seconds=599))  # still alive, and never spent by the refusal
    assert checkpoint.stub().Check(subnet_call(run, asked, token), timeout=5).verdict == pb.VERDICT_ALLOW


def test_any_process_verifies_a_token_with_the_published_public_keys_alone(checkpoint):
    run = started(checkpoint)
    keys = published(checkpoint)
    kid = run.run_token.split(".")[1]
    assert list(keys) == [kid]
    got = verify(run.run_token, RUN_LABEL, keys.get, datetime.now(UTC).timestamp())
    assert got["run_id"] == run.run_id
    # a key outside the set (a forger's own), with the same claims, verifies nothing
    forger = token_keys.KeySet(None)
    forged_kid, forged_key = forger.signing_key()
    body = f"{RUN_LABEL}.{forged_kid}.{run.run_token.split('.')[2]}"
    forged = f"{body}.{base64.urlsafe_b64encode(forged_key.sign(body.encode())).rstrip(b'=').decode()}"
    for token in (forged, f"{RUN_LABEL}.{kid}.{run.run_token.split('.')[2]}.{forged.split('.')[3]}"):
        try:
            verify(token, RUN_LABEL, keys.get, datetime.now(UTC).timestamp())
            raise AssertionError("a forged token verified")
        except TokenInvalid:
            pass
        assert checkpoint.stub().Check(call(token), timeout=5).code == "run_token_invalid"


def test_the_shared_secret_format_of_before_is_refused_even_when_signed_with_the_grant_key(checkpoint):
    """A wrun1 token made the old way (HMAC keyed from the grant key, which the toolrunner holds too)
    is refused: the grant key mints no run tokens any more."""
    run = started(checkpoint)
    old_claims = {k: v for k, v in claims(run.run_token).items() if k not in ("iat", "exp")}
    for label in ("wrun1", "wapv1"):
        key = hmac.new(checkpoint.key.secret, f"warden {label} token".encode(), hashlib.sha256).digest()
        body = f"{label}.{base64.urlsafe_b64encode(canonical.dumps(old_claims)).rstrip(b'=').decode()}"
        sig = base64.urlsafe_b64encode(hmac.new(key, body.encode(), hashlib.sha256).digest()).rstrip(b"=").decode()
        got = checkpoint.stub().Check(call(f"{body}.{sig}"), timeout=5)
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_token_invalid"), label
    got = checkpoint.stub().Check(call(f"wrun1.{body.split('.')[1]}.{sig}"), timeout=5)
    assert "no longer accepted" in got.reason


def test_the_key_rotates_while_runs_are_live_on_two_workers(start, tmp_path):
    tokens = {hashlib.sha256(TOKEN.encode()).digest(): "driver",
              hashlib.sha256(PERSON_TOKEN.encode()).digest(): "carol"}
    data = tmp_path / "shared-data"
    key = SigningKey.generate()
    a, b = (start(auth=AuthPolicy(tokens=tokens), key=key, data_dir=data, shared=True, watch_interval=None)
            for _ in range(2))
    before = started(a)
    old = before.run_token.split(".")[1]
    assert b.stub().Check(call(before.run_token), timeout=5).verdict == pb.VERDICT_ALLOW  # memoised on b
    new = token_keys.rotate(data / token_keys.FOLDER)  # what `warden keys rotate` does, the workers running
    after = started(b)
    assert after.run_token.split(".")[1] == new != old
    assert set(published(a)) == {old, new}
    for worker in (a, b):
        for run in (before, after):
            assert worker.stub().Check(call(run.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    assert started(a).run_token.split(".")[1] == new  # the other worker signs with the new key too
    token_keys.retire(data / token_keys.FOLDER, old)
    for worker in (a, b):
        got = worker.stub().Check(call(before.run_token), timeout=5)  # memoised on both: asked again anyway
        assert (got.verdict, got.code) == (pb.VERDICT_DENY, "run_token_invalid"), got
        assert worker.stub().Check(call(after.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    assert set(published(b)) == {new}


def test_the_active_key_cannot_be_retired(tmp_path):
    folder = tmp_path / token_keys.FOLDER
    keys = token_keys.KeySet(folder)
    kid, _ = keys.signing_key()
    try:
        token_keys.retire(folder, kid)
        raise AssertionError("the active key was retired")
    except ValueError as exc:
        assert "rotate first" in str(exc)


PARTS = st.integers(min_value=0, max_value=3)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(part=PARTS, position=st.integers(min_value=0, max_value=10_000), char=st.sampled_from("AQgw_-.=0z"),
       label=st.sampled_from([RUN_LABEL, APPROVAL_LABEL]))
def test_any_one_character_changed_anywhere_in_a_token_is_refused(part, position, char, label):
    keys = token_keys.KeySet(None)
    from warden.tokens import Signer

    signer = Signer(keys, label, 3600)
    token = signer.sign({"run_id": "run-1", "decision_id": "d"})
    pieces = token.split(".")
    piece = pieces[part]
    i = position % len(piece)
    if piece[i] == char:
        return
    pieces[part] = piece[:i] + char + piece[i + 1:]
    changed = ".".join(pieces)
    try:
        signer.verify(changed)
    except TokenExpired:
        raise AssertionError("a changed token read as expired, not invalid") from None
    except TokenInvalid:
        return
    raise AssertionError(f"{changed!r} verified")


def test_a_recorded_resume_renews_the_run_token_for_another_lifetime(start):
    """A run lasts as long as people keep resuming it: each recorded resume answers a token for
    the same run with a new lifetime; a pause, a cancel or a refused resume renews nothing."""
    checkpoint = start(run_token_ttl=3600)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    at(checkpoint, now)
    run = started(checkpoint)
    pause = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="pause", person="alice")
    assert not checkpoint.stub().RecordAct(pause, timeout=5).run_token
    at(checkpoint, now + timedelta(seconds=3000))
    resume = pb.RecordActRequest(run=pb.RunContext(run_token=run.run_token), act="resume", person="alice")
    got = checkpoint.stub().RecordAct(resume, timeout=5)
    assert got.decision.code == "recorded" and got.run_token and got.run_token != run.run_token
    renewed = claims(got.run_token)
    assert renewed["exp"] == claims(run.run_token)["iat"] + 3000 + 3600
    assert {k: v for k, v in renewed.items() if k not in ("iat", "exp")} == {
        k: v for k, v in claims(run.run_token).items() if k not in ("iat", "exp")}
    at(checkpoint, now + timedelta(seconds=3600))  # the first token is over; the renewed one lives on
    assert checkpoint.stub().Check(call(run.run_token), timeout=5).code == "run_token_expired"
    assert checkpoint.stub().Check(call(got.run_token), timeout=5).verdict == pb.VERDICT_ALLOW
    cancel = pb.RecordActRequest(run=pb.RunContext(run_token=got.run_token), act="cancel", person="alice")
    assert not checkpoint.stub().RecordAct(cancel, timeout=5).run_token
    again = checkpoint.stub().RecordAct(
        pb.RecordActRequest(run=pb.RunContext(run_token=got.run_token), act="resume", person="alice"), timeout=5)
    assert (again.decision.code, again.run_token) == ("run_ended", "")
