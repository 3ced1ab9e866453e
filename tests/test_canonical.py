"""CHAP canonical JSON: the shared vectors, rfc8785 as the oracle, and the
CHAP restrictions (integers only, no lone surrogates) and the depth walk."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from coordinator.engine.canonical import (
    MAX_SAFE_INTEGER,
    ZERO_HASH,
    canonical_bytes,
    digest,
    inspect,
    inspect_copy,
    link_hash,
)
from coordinator.errors import CanonicalError

VECTORS = json.loads(
    (Path(__file__).parent / "vectors" / "canonical-number-vectors.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize(
    "case", VECTORS["accept"], ids=[json.dumps(c["value"]) for c in VECTORS["accept"]]
)
def test_accept_vectors(case):
    assert canonical_bytes(case["value"]) == case["canonical"].encode("utf-8")


@pytest.mark.parametrize("case", VECTORS["reject"], ids=[c["json"] for c in VECTORS["reject"]])
def test_reject_vectors(case):
    value = json.loads(case["json"])
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


def test_vector_file_is_complete():
    # Guard against a silently emptied vector file.
    assert len(VECTORS["accept"]) == 15 and len(VECTORS["reject"]) == 6


# -- rfc8785 as the oracle --------------------------------------------------

_safe_ints = st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
# Any valid Unicode scalar value: BMP (incl. controls and U+E000..U+FFFF) and astral.
_chars = st.characters(codec="utf-8")
_text = st.text(_chars, max_size=12)
# Keys biased towards the characters where UTF-16 order differs from code point order.
_key_chars = st.one_of(
    _chars,
    st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF, codec="utf-8"),
    st.characters(min_codepoint=0x10000, max_codepoint=0x10FFFF),
    st.characters(min_codepoint=0x00, max_codepoint=0x1F),
)
_keys = st.text(_key_chars, max_size=6)

json_values = st.recursive(
    st.none() | st.booleans() | _safe_ints | _text,
    lambda children: st.lists(children, max_size=5)
    | st.dictionaries(_keys, children, max_size=6),
    max_leaves=30,
)


@given(json_values)
def test_matches_rfc8785_for_integer_json(value):
    assert canonical_bytes(value) == rfc8785.dumps(value)


@given(st.dictionaries(_keys, _safe_ints, min_size=2, max_size=8))
def test_key_order_is_utf16(value):
    out = canonical_bytes(value)
    assert out == rfc8785.dumps(value)
    keys = list(json.loads(out))
    assert keys == sorted(keys, key=lambda k: k.encode("utf-16-be"))


def test_astral_keys_sort_below_private_use():
    # U+1F600 is D83D DE00 in UTF-16, below U+E000; code point order says otherwise.
    value = {"\ue000": 1, "\U0001f600": 2, "a": 3, "\uffff": 4}
    out = canonical_bytes(value)
    assert out == rfc8785.dumps(value)
    assert list(json.loads(out)) == ["a", "\U0001f600", "\ue000", "\uffff"]


def test_nested_astral_keys_reordered_at_every_level():
    value = {"z": [{"\ue001": 1, "\U00010000": {"\uffff": 0, "\U0010ffff": 1}}], "\U0001f600": None}
    assert canonical_bytes(value) == rfc8785.dumps(value)


def test_control_characters_escaped_as_jcs():
    value = {"\x00k": "\x00\x01\x08\t\n\x0b\x0c\r\x1f\"\\/\x7f\u2028\u2029"}
    assert canonical_bytes(value) == rfc8785.dumps(value)


# -- CHAP restrictions ------------------------------------------------------

@pytest.mark.parametrize(
    "value",
    ["\ud800", "a\udfffb", {"\ud83d": 1}, ["ok", {"k": ["\udc00"]}], {"x": {"\ud800x": "v"}}],
    ids=["high", "low-inside", "key", "nested-value", "nested-key"],
)
def test_lone_surrogates_refused(value):
    with pytest.raises(CanonicalError, match="surrogate"):
        canonical_bytes(value)
    assert inspect(value).error is not None


def test_paired_surrogates_are_a_character():
    # A Python str never holds a *pair* of surrogates as one character; the
    # astral character itself is fine.
    assert canonical_bytes("\U0001f600") == rfc8785.dumps("\U0001f600")


@pytest.mark.parametrize(
    "value, expected",
    [
        (2.0, b"2"),
        (-0.0, b"0"),
        (0.0, b"0"),
        (-3.0, b"-3"),
        (float(MAX_SAFE_INTEGER), b"9007199254740991"),
        ({"a": [1.0, {"b": 1e3}]}, b'{"a":[1,{"b":1000}]}'),
    ],
)
def test_integral_floats_canonicalise_as_integers(value, expected):
    assert canonical_bytes(value) == expected


@pytest.mark.parametrize(
    "value",
    [1.5, 0.1, 1e-7, 1e21, 2.0**53, float("nan"), float("inf"), -math.inf, [0.5], {"a": {"b": 0.25}}],
)
def test_non_integers_refused(value):
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**64])
def test_integers_outside_safe_range_refused(value):
    with pytest.raises(CanonicalError, match="range"):
        canonical_bytes(value)


@pytest.mark.parametrize("value", [{1: "a"}, (1, 2), {"a": {1, 2}}, b"x", object()])
def test_non_json_values_refused(value):
    with pytest.raises(CanonicalError):
        canonical_bytes(value)


@given(st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER))
def test_integral_float_same_bytes_as_int(n):
    f = float(n)
    if f.is_integer() and abs(f) <= MAX_SAFE_INTEGER:
        assert canonical_bytes(f) == canonical_bytes(int(f)) == rfc8785.dumps(int(f))


# -- depth, digest and link --------------------------------------------------

def _nest(n, leaf=0, kind=list):
    v = leaf
    for _ in range(n):
        v = [v] if kind is list else {"k": v}
    return v


@pytest.mark.parametrize("leaf", [0, "s", None, [], {}])
@pytest.mark.parametrize("kind", [list, dict])
def test_depth_counts_the_value_itself_as_level_one(leaf, kind):
    assert inspect(leaf).depth == 1
    for n in (1, 5, 63, 64, 100):
        assert inspect(_nest(n, leaf, kind)).depth == n + 1


def test_depth_is_the_deepest_branch():
    value = {"a": 1, "b": [[[2]]], "c": {"d": {}}}
    assert inspect(value).depth == 5


def test_inspect_reports_first_error_and_still_measures_depth():
    shape = inspect({"a": 1.5, "b": [[["\ud800"]]]})
    assert "integers" in str(shape.error)
    assert shape.depth == 5


_JSON_WITH_INTEGRAL_FLOATS = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    | st.integers(-(2**40), 2**40).map(float)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


def _containers(value):
    """Every dict and list in `value`, itself included."""
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _containers(v)
    elif isinstance(value, list):
        yield value
        for v in value:
            yield from _containers(v)


def _same(a, b):
    """Equal with the same types, key orders included (1 == 1.0 is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@given(_JSON_WITH_INTEGRAL_FLOATS)
def test_inspect_copy_checks_like_inspect_and_copies_with_integers(value):
    """The copy: the same JSON (RFC 8785's bytes of it are the canonical
    bytes of the value), integral floats as integers, keys in the same
    order, and not one dict or list shared with the value."""
    shape, copy = inspect_copy(value)
    alone = inspect(value)
    assert (shape.depth, shape.error, shape.needs_copy) == (alone.depth, alone.error, alone.needs_copy)
    assert rfc8785.dumps(copy) == canonical_bytes(value)
    expected = json.loads(json.dumps(value), parse_float=lambda text: int(float(text)))
    assert _same(copy, expected)
    held = {id(c) for c in _containers(value)}
    assert not any(id(c) in held for c in _containers(copy))


def test_digest_and_link_hash():
    import hashlib

    value = {"b": 1, "a": [True, None]}
    raw = rfc8785.dumps(value)
    assert digest(value) == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert ZERO_HASH == "sha256:" + "0" * 64
    assert link_hash(raw, ZERO_HASH) == "sha256:" + hashlib.sha256(raw + ZERO_HASH.encode()).hexdigest()
