"""Every way a signed statement can be malformed is refused, and says which way (an operator reads
the reason in the record). The signature would refuse most of them anyway; these pin the reasons."""

from __future__ import annotations

import base64

import pytest

from warden.token_keys import KeySet
from warden.tokens import APPROVAL_LABEL, MAX_TOKEN_BYTES, RUN_LABEL, Signer, TokenInvalid, _b64

KEYS = KeySet(None)
TTL = 3600


def refused(signer: Signer, token: str) -> str:
    with pytest.raises(TokenInvalid) as err:
        signer.verify(token)
    return str(err.value)


def claims_of(got: dict) -> dict:
    return {k: v for k, v in got.items() if k not in ("iat", "exp")}


def test_a_good_token_gives_back_its_claims():
    signer = Signer(KEYS, RUN_LABEL, TTL)
    assert claims_of(signer.verify(signer.sign({"run_id": "run-1"}))) == {"run_id": "run-1"}


def test_a_token_over_the_size_cap_is_refused_for_its_size_and_one_at_the_cap_is_read():
    signer = Signer(KEYS, RUN_LABEL, TTL)
    assert refused(signer, "x" * (MAX_TOKEN_BYTES + 1)) == "token too long"
    assert refused(signer, "x" * MAX_TOKEN_BYTES) != "token too long"


def test_another_kind_of_token_or_a_missing_part_is_not_this_kind():
    runs, approvals = Signer(KEYS, RUN_LABEL, TTL), Signer(KEYS, APPROVAL_LABEL, TTL)
    approval = approvals.sign({"decision_id": "d"})
    assert refused(runs, approval) == f"not a {RUN_LABEL} token"  # label, key id, payload and signature all there
    label, kid, payload, signature = runs.sign({"run_id": "r"}).split(".")
    assert refused(runs, f"{label}.{kid}.{payload}.") == f"not a {RUN_LABEL} token"
    assert refused(runs, f"{label}.{kid}..{signature}") == f"not a {RUN_LABEL} token"
    assert refused(runs, f"{label}..{payload}.{signature}") == f"not a {RUN_LABEL} token"


def test_a_wrong_signature_and_a_malformed_one_say_so():
    signer = Signer(KEYS, RUN_LABEL, TTL)
    label, kid, payload, signature = signer.sign({"run_id": "r"}).split(".")
    assert refused(signer, f"{label}.{kid}.{payload}.{_b64(b'x' * 64)}") == "signature does not verify"
    other = KeySet(None)
    other_kid = other.signing_key()[0]
    assert refused(Signer(other, RUN_LABEL, TTL), f"{label}.{kid}.{payload}.{signature}").startswith(
        f"signed with key {kid!r}")  # a key outside the set verifies nothing
    assert refused(signer, f"{label}.{other_kid}.{payload}.{signature}").startswith("signed with key")
    assert refused(signer, f"{label}.{kid}.{payload}.!!!not-base64!!!") == "token is not well formed"


def test_signed_claims_that_are_not_an_object_are_refused():
    signer = Signer(KEYS, RUN_LABEL, TTL)
    kid, key = KEYS.signing_key()
    body = f"{RUN_LABEL}.{kid}.{_b64(b'[1]')}"
    assert refused(signer, f"{body}.{_b64(key.sign(body.encode()))}") == "token claims are not an object"


def test_a_signature_spelled_another_way_is_another_token_and_refused():
    """base64 decoding forgives: a character added, or the last character's unused bits set,
    gives the same bytes. Only the one spelling the checkpoint wrote verifies."""
    signer = Signer(KEYS, RUN_LABEL, TTL)
    label, kid, payload, signature = signer.sign({"run_id": "r"}).split(".")
    assert len(signature) == 86  # 64 bytes: 516 bits of base64, the last character's 4 low bits unused
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(signature[-1])
    twin = signature[:-1] + alphabet[last ^ 1]  # same 64 bytes, another string
    assert _b64(base64.urlsafe_b64decode(twin + "==")) == signature
    for other in (twin, signature + "=", signature + "==", signature + "A", signature[:20] + "\n" + signature[20:]):
        assert refused(signer, f"{label}.{kid}.{payload}.{other}") in ("signature does not verify",
                                                                       "token is not well formed")
    assert claims_of(signer.verify(f"{label}.{kid}.{payload}.{signature}")) == {"run_id": "r"}
