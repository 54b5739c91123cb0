"""warden.canonical is RFC 8785: byte-identical to `rfc8785.dumps`, fast path or not."""

from __future__ import annotations

import enum
import json

import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from warden import canonical

SAFE = canonical.MAX_SAFE_INTEGER
# Text that exercises every escaping rule: controls, quote, backslash, U+2028, U+007F, the
# edges of the BMP (U+E000..U+FFFF sort after surrogate pairs in UTF-16) and astral characters.
_chars = st.characters(exclude_categories=("Cs",)) | st.sampled_from(
    ["\x00", "\x1f", '"', "\\", "\u2028", "\x7f", "\ue000", "\uffff", "\U0001f600", "\U00010000", "é"]
)
_text = st.text(_chars, max_size=12)
_ints = st.integers(min_value=-SAFE, max_value=SAFE) | st.sampled_from([SAFE, -SAFE, 0, 2**31, -(2**32)])
_floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [1e-7, 1e21, 1e-6, 1e20, 5.0, -0.0, 2.0**60, 0.1, 1.5e300, 5e-324]
)
_leaves = st.none() | st.booleans() | _ints | _text | _floats
_json = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=20,
)
# What the fast path takes, floats at the edges of its range among them.
_fast_floats = st.floats(min_value=1e-4, max_value=1e16, exclude_max=True) | st.sampled_from(
    [1e-4, 0.5, 12.5, 123456.789, 0.1 + 0.2, 4503599627370495.5, 9999999999999998.0, 1.0000000000000002]
)
_fast_json = st.recursive(
    st.none() | st.booleans() | _ints | _text | _fast_floats | _fast_floats.map(lambda f: -f),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=5),
    max_leaves=20,
)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(_json)
def test_any_json_value_is_rfc8785(value):
    assert canonical.dumps(value) == rfc8785.dumps(value)
    assert canonical.dumps_text(value) == rfc8785.dumps(value).decode()


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(_fast_json)
def test_fast_path_is_byte_identical_to_rfc8785(value):
    if canonical._is_fast(value):  # astral keys and whole floats leave it
        assert canonical._encode(value).encode() == rfc8785.dumps(value)
    assert canonical.dumps(value) == rfc8785.dumps(value)


def test_the_numbers_python_and_rfc8785_write_differently():
    assert canonical.dumps({"x": 1e-7}) == b'{"x":1e-7}'  # json writes 1e-07
    assert canonical.dumps({"x": 1e21, "y": 1e20}) == b'{"x":1e+21,"y":100000000000000000000}'
    assert canonical.dumps([5.0, -0.0, 0.5]) == b"[5,0,0.5]"  # whole floats as integers, as before
    assert canonical.dumps(2.0**60) == b"1152921504606847000"  # a double is written as ECMAScript does
    assert canonical.dumps(SAFE) == b"9007199254740991"


def test_which_floats_take_the_fast_path():
    fast = [0.5, -12.5, 1e-4, 123456.789, 4503599627370495.5]
    slow = [5.0, 9.99e-5, 1e-7, 1e16, 1e21, 2.0**60, -0.0, 0.0, float("nan"), float("inf")]
    assert all(canonical._is_fast(x) for x in fast) and not any(canonical._is_fast(x) for x in slow)


def test_keys_sort_by_utf16_code_units():
    # U+FFFF sorts after U+1F600 in code points but before it in UTF-16 (D83D DE00 < FFFF)
    assert canonical.dumps({"\uffff": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\uffff":1}'.encode()
    assert canonical._is_fast({"\U0001f600": 1}) is False and canonical._is_fast({"\uffff": 1}) is True


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64, {"id": 12345678901234567890}])
def test_integers_beyond_2_53_are_refused(value):
    with pytest.raises(ValueError, match="2\\*\\*53"):
        canonical.dumps(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), {"x": [float("-inf")]}])
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(ValueError):
        canonical.dumps(value)


def test_lone_surrogates_are_refused_not_written():
    with pytest.raises(ValueError):
        canonical.dumps({"x": "\ud800"})
    with pytest.raises(ValueError):
        canonical.dumps("\udfff")


def test_subclasses_and_tuples_are_written_as_their_plain_values():
    class Colour(str, enum.Enum):  # noqa: UP042 (its __str__ is the name: the text must be the value)
        RED = "red"

    class Count(int):
        pass

    assert canonical.dumps({"c": Colour.RED, "n": Count(3), "t": (1, True)}) == b'{"c":"red","n":3,"t":[1,true]}'


def test_normalise_gives_tools_whole_numbers_as_integers():
    assert canonical.normalise({"n": 3.0, "x": 0.5, "big": 2.0**60, "t": (1,)}) == {"n": 3, "x": 0.5, "big": 2.0**60, "t": [1]}
    assert type(canonical.normalise(3.0)) is int and type(canonical.normalise(2.0**60)) is float


def test_not_json_is_a_type_error():
    with pytest.raises(TypeError):
        canonical.dumps({"x": object()})


def test_output_parses_back_to_the_same_value():
    value = {"a": [1, "two", None, True], "b": {"c": "\U0001f600\n"}, "d": 0.25}
    assert json.loads(canonical.dumps(value)) == value


def test_a_grant_binds_the_rfc8785_hash_of_its_arguments():
    from warden import grants

    key = grants.SigningKey.generate()
    arguments = {"ratio": 1e-7, "count": 3.0, "name": "\U0001f600"}
    grant = grants.sign(key, decision_id="d", run_id="r", agent="a", agent_version="a@1", tool="t",
                        arguments=arguments, policy_revision="p")  # fmt: skip
    assert grant.arguments_sha256 == __import__("hashlib").sha256(rfc8785.dumps(arguments)).hexdigest()
    # the toolrunner gets the same call as plain JSON, whatever wrote it (Node writes 1e-7 and 3)
    same = json.loads('{"name":"\\ud83d\\ude00","count":3,"ratio":1e-7}')
    grants.verify(key, grant, run_id="r", agent_version="a@1", tool="t", arguments=same)
    with pytest.raises(grants.GrantError) as info:  # no canonical form: refused, never rounded
        grants.verify(key, grant, run_id="r", agent_version="a@1", tool="t", arguments={"id": 2**60})
    assert info.value.code == "grant_mismatch"
