"""CHAP canonical JSON (RFC 8785 restricted to integers) and sha256 digests.

One walk validates a value (integers only, |n| <= 2**53-1, no lone surrogates)
and measures its nesting; `msgspec` then writes the bytes, whose string
escaping matches JCS byte for byte. Keys sort by UTF-16 code units, which
differs from code point order only when a key holds a character above U+FFFF;
such dicts are re-ordered before encoding.
"""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

__all__ = [
    "MAX_SAFE_INTEGER",
    "ZERO_HASH",
    "CanonicalError",
    "Shape",
    "canonical_bytes",
    "digest",
    "inspect",
    "link_hash",
]

MAX_SAFE_INTEGER = 2**53 - 1
ZERO_HASH = "sha256:" + "0" * 64

_sorted_encode = msgspec.json.Encoder(order="sorted").encode
_ordered_encode = msgspec.json.Encoder().encode


class CanonicalError(ValueError):
    """A value has no CHAP canonical form; the message says why and what to send."""


class Shape:
    """What one walk learned about a value: nesting depth, and whether encoding
    needs a normalised copy (integral floats, UTF-16 key order)."""

    __slots__ = ("depth", "error", "needs_copy")

    def __init__(self) -> None:
        self.depth = 0
        self.error: CanonicalError | None = None
        self.needs_copy = False


def _check_str(s: str, shape: Shape) -> None:
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            shape.error = shape.error or CanonicalError(
                "strings must be valid Unicode (I-JSON, RFC 7493): a lone UTF-16 "
                "surrogate cannot be canonicalised"
            )
        else:
            if max(s) > "\uffff":
                shape.needs_copy = True


def _walk(value: Any, level: int, shape: Shape) -> None:
    if level > shape.depth:
        shape.depth = level
    t = type(value)
    if t is str:
        _check_str(value, shape)
    elif t is dict:
        for k, v in value.items():
            if type(k) is not str:
                shape.error = shape.error or CanonicalError("object keys must be strings")
            else:
                _check_str(k, shape)
            _walk(v, level + 1, shape)
    elif t is list:
        for v in value:
            _walk(v, level + 1, shape)
    elif t is int:
        if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            shape.error = shape.error or CanonicalError(
                f"integer {value} is outside the CHAP canonical range "
                f"±{MAX_SAFE_INTEGER}; send it as a string"
            )
    elif t is float:
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            shape.error = shape.error or CanonicalError(
                "CHAP canonical numbers must be integers; represent decimals as "
                'strings (e.g. "8.2") so the hash is deterministic across implementations.'
            )
        elif abs(value) > MAX_SAFE_INTEGER:
            shape.error = shape.error or CanonicalError(
                f"number {value!r} is outside the CHAP canonical range ±{MAX_SAFE_INTEGER}"
            )
        else:
            shape.needs_copy = True
    elif value is None or t is bool:
        pass
    else:
        shape.error = shape.error or CanonicalError(
            f"a {t.__name__} is not a JSON value and cannot be canonicalised"
        )


def inspect(value: Any) -> Shape:
    """Walk `value` once: its depth (the value itself is level 1) and any error."""
    shape = Shape()
    _walk(value, 1, shape)
    return shape


def _normalise(value: Any) -> Any:
    t = type(value)
    if t is dict:
        keys = sorted(value, key=lambda k: k.encode("utf-16-be"))
        return {k: _normalise(value[k]) for k in keys}
    if t is list:
        return [_normalise(v) for v in value]
    if t is float:
        return int(value)
    return value


def canonical_bytes(value: Any, shape: Shape | None = None) -> bytes:
    """The JCS bytes of `value`; raises CanonicalError if it has none.

    Pass the `Shape` from an earlier `inspect(value)` to skip a second walk.
    """
    if shape is None:
        shape = inspect(value)
    if shape.error is not None:
        raise shape.error
    if shape.needs_copy:
        return _ordered_encode(_normalise(value))
    return _sorted_encode(value)


def digest(value: Any) -> str:
    """`sha256:` + hex of SHA-256 over the JCS bytes of `value`."""
    return "sha256:" + hashlib.sha256(canonical_bytes(value)).hexdigest()


def link_hash(record_bytes: bytes, prev_hash: str) -> str:
    """The chain link: SHA-256(JCS(record) || prev_hash as UTF-8)."""
    h = hashlib.sha256(record_bytes)
    h.update(prev_hash.encode("ascii"))
    return "sha256:" + h.hexdigest()
