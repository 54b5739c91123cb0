"""Every way a signed statement can be malformed is refused, and says which way (an operator reads
the reason in the record). The signature would refuse most of them anyway; these pin the reasons."""

from __future__ import annotations

import base64

import pytest

from checkpoint.server.tokens import APPROVAL_LABEL, MAX_TOKEN_BYTES, RUN_LABEL, Signer, TokenInvalid, _b64

KEY = b"k" * 32


def refused(signer: Signer, token: str) -> str:
    with pytest.raises(TokenInvalid) as err:
        signer.verify(token)
    return str(err.value)


def test_a_good_token_gives_back_its_claims():
    signer = Signer(KEY, RUN_LABEL)
    assert signer.verify(signer.sign({"run_id": "run-1"})) == {"run_id": "run-1"}


def test_a_token_over_the_size_cap_is_refused_for_its_size_and_one_at_the_cap_is_read():
    signer = Signer(KEY, RUN_LABEL)
    assert refused(signer, "x" * (MAX_TOKEN_BYTES + 1)) == "token too long"
    assert refused(signer, "x" * MAX_TOKEN_BYTES) != "token too long"


def test_another_kind_of_token_or_a_missing_part_is_not_this_kind():
    runs, approvals = Signer(KEY, RUN_LABEL), Signer(KEY, APPROVAL_LABEL)
    approval = approvals.sign({"decision_id": "d"})
    assert refused(runs, approval) == f"not a {RUN_LABEL} token"  # label, payload and signature all there
    label, payload, signature = runs.sign({"run_id": "r"}).split(".")
    assert refused(runs, f"{label}.{payload}.") == f"not a {RUN_LABEL} token"
    assert refused(runs, f"{label}..{signature}") == f"not a {RUN_LABEL} token"


def test_a_wrong_signature_and_a_malformed_one_say_so():
    signer = Signer(KEY, RUN_LABEL)
    label, payload, signature = signer.sign({"run_id": "r"}).split(".")
    assert refused(signer, f"{label}.{payload}.{_b64(b'x' * 32)}") == "signature does not verify"
    assert refused(Signer(b"other" * 8, RUN_LABEL), f"{label}.{payload}.{signature}") == "signature does not verify"
    assert refused(signer, f"{label}.{payload}.!!!not-base64!!!") == "token is not well formed"


def test_signed_claims_that_are_not_an_object_are_refused():
    signer = Signer(KEY, RUN_LABEL)
    assert refused(signer, signer.sign(["run_id", "r"])) == "token claims are not an object"  # type: ignore[arg-type]


def test_a_signature_spelled_another_way_is_another_token_and_refused():
    """base64 decoding forgives: a character added, or the last character's two unused bits set,
    gives the same bytes. Only the one spelling the checkpoint wrote verifies."""
    signer = Signer(KEY, RUN_LABEL)
    label, payload, signature = signer.sign({"run_id": "r"}).split(".")
    assert len(signature) == 43  # 32 bytes: 258 bits of base64, the last character's 2 low bits unused
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(signature[-1])
    twin = signature[:-1] + alphabet[last ^ 1]  # same 32 bytes, another string
    assert _b64(base64.urlsafe_b64decode(twin + "=")) == signature
    for other in (twin, signature + "=", signature + "==", signature + "A", signature[:20] + "\n" + signature[20:]):
        assert refused(signer, f"{label}.{payload}.{other}") in ("signature does not verify", "token is not well formed")
    assert signer.verify(f"{label}.{payload}.{signature}") == {"run_id": "r"}
