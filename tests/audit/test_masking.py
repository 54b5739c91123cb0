from __future__ import annotations

import copy
import hashlib
import hmac

import pytest

from checkpoint.audit import mask_arguments


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


ARGS = {
    "order": "o-1",
    "card": {"number": "4111111111111111", "cvv": "123", "holder": "Ann"},
    "items": [{"sku": "a", "secret": "s1"}, {"sku": "b", "secret": "s2"}, "plain"],
    "amount": 12,
}


def test_drop_and_hash_by_dotted_path():
    original = copy.deepcopy(ARGS)
    masked = mask_arguments(ARGS, drop=["card.cvv"], hash=["card.number", "order"])
    assert masked == {
        "order": _sha("o-1"),
        "card": {"number": _sha("4111111111111111"), "holder": "Ann"},
        "items": ARGS["items"],
        "amount": 12,
    }
    assert ARGS == original  # pure: the input is untouched


def test_path_through_a_list_applies_to_every_element():
    masked = mask_arguments(ARGS, drop=["items.secret"])
    assert masked["items"] == [{"sku": "a"}, {"sku": "b"}, "plain"]


def test_missing_paths_and_paths_through_scalars_are_no_ops():
    assert mask_arguments(ARGS, drop=["nope", "card.nope", "amount.deeper"], hash=["x.y"]) == ARGS


def test_non_string_values_hash_as_canonical_json():
    masked = mask_arguments({"card": {"b": 2, "a": 1}, "n": 12}, hash=["card", "n"])
    assert masked["card"] == "sha256:" + hashlib.sha256(b'{"a":1,"b":2}').hexdigest()
    assert masked["n"] == "sha256:" + hashlib.sha256(b"12").hexdigest()


def test_prefix_wins_and_drop_beats_hash():
    assert (
        mask_arguments(ARGS, hash=["card"], drop=["card.cvv"])["card"]
        == mask_arguments(ARGS, hash=["card"])["card"]
    )
    assert "card" not in mask_arguments(ARGS, drop=["card"], hash=["card.number"])
    assert "order" not in mask_arguments(ARGS, drop=["order"], hash=["order"])
    assert "order" not in mask_arguments(ARGS, hash=["order"], drop=["order"])


def test_keyed_digest():
    masked = mask_arguments(ARGS, hash=["card.number"], key=b"k")
    expected = hmac.new(b"k", b"4111111111111111", hashlib.sha256).hexdigest()
    assert masked["card"]["number"] == "hmac-sha256:" + expected


def test_no_rules_returns_a_copy():
    masked = mask_arguments(ARGS)
    assert masked == ARGS and masked is not ARGS


@pytest.mark.parametrize("path", ["", "card.", ".cvv", "card..cvv"])
def test_malformed_paths_are_errors(path):
    with pytest.raises(ValueError, match="bad masking path"):
        mask_arguments(ARGS, drop=[path])
