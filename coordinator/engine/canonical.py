"""CHAP canonical JSON (RFC 8785 restricted to integers) and sha256 digests.

One walk validates a value (integers only, |n| <= 2**53-1, no lone surrogates)
and measures its nesting; `msgspec` then writes the bytes, whose string
escaping matches JCS byte for byte. Keys sort by UTF-16 code units, which
differs from code point order only when a key holds a character above U+FFFF;
such dicts are re-ordered before encoding.
"""

from __future__ import annotations

from hashlib import sha256  # compiled, hashlib.sha256 adds an attribute lookup per call
from typing import Any, Final

import msgspec

from coordinator.errors import CanonicalError

__all__ = [
    "MAX_SAFE_INTEGER",
    "ZERO_HASH",
    "Shape",
    "canonical_bytes",
    "digest",
    "inspect",
    "inspect_copy",
    "is_ascii",
    "link_hash",
]

# Final: compiled, a constant rather than a lookup of the module's globals.
MAX_SAFE_INTEGER: Final = 2**53 - 1
ZERO_HASH = "sha256:" + "0" * 64

# The walk stops descending here (a refusal for depth needs no deeper look,
# and Python's recursion limit must never be reached).
_DEEPEST: Final = 100

_sorted_encode = msgspec.json.Encoder(order="sorted").encode
_ordered_encode = msgspec.json.Encoder().encode


class Shape:
    """What one walk learned about a value: nesting depth, and whether encoding
    needs a normalised copy (integral floats, UTF-16 key order)."""

    __slots__ = ("depth", "error", "needs_copy")

    def __init__(self) -> None:
        self.depth = 0
        self.error: CanonicalError | None = None
        self.needs_copy = False


def _check_str(s: str, shape: Shape) -> None:
    """Non-ASCII strings: refuse lone surrogates, note astral characters."""
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


_NOT_INTEGER = (
    "CHAP canonical numbers must be integers; represent decimals as "
    'strings (e.g. "8.2") so the hash is deterministic across implementations.'
)


def _check_scalar(v: Any, shape: Shape) -> None:
    """The scalars the fast loop in `_walk` does not settle itself."""
    t = type(v)
    if t is int:
        shape.error = shape.error or CanonicalError(
            f"integer {v} is outside the CHAP canonical range ±{MAX_SAFE_INTEGER}; send it as a string"
        )
    elif t is float:
        if v != v or v in (float("inf"), float("-inf")) or not v.is_integer():
            shape.error = shape.error or CanonicalError(_NOT_INTEGER)
        elif abs(v) > MAX_SAFE_INTEGER:
            shape.error = shape.error or CanonicalError(
                f"number {v!r} is outside the CHAP canonical range ±{MAX_SAFE_INTEGER}"
            )
        else:
            shape.needs_copy = True
    elif t is str:
        _check_str(v, shape)
    else:
        shape.error = shape.error or CanonicalError(
            f"a {t.__name__} is not a JSON value and cannot be canonicalised"
        )


# `str.isascii`, unbound: compiled, `s.isascii()` looks the method up by name
# on every call (mypyc has no primitive for it); this calls it directly.
is_ascii: Final = str.isascii


def _member(v: Any, level: int, shape: Shape, copy: bool) -> Any:
    """Check one member of a container at `level`; with `copy`, return its
    copy (integral floats as integers, the immutable scalars shared)."""
    t = type(v)
    if t is str:
        s: str = v
        if not is_ascii(s):
            _check_str(s, shape)
    elif t is dict or t is list:
        return _walk(v, level + 1, shape, copy)
    elif t is int:
        n: int = v
        if not -MAX_SAFE_INTEGER <= n <= MAX_SAFE_INTEGER:
            _check_scalar(n, shape)
    elif v is None or t is bool:
        pass
    else:
        _check_scalar(v, shape)
        if copy and t is float and v.is_integer():
            return int(v)
    return v


def _walk(container: Any, level: int, shape: Shape, copy: bool) -> Any:
    """Check the members of a dict or list at `level` (scalars inside count
    one deeper); with `copy`, return its copy, in the same key order."""
    # Typed locals: compiled, a dict or list iterates natively.
    if type(container) is dict:
        d: dict[Any, Any] = container
        for k in d:
            if type(k) is not str:
                shape.error = shape.error or CanonicalError("object keys must be strings")
            elif not is_ascii(k):
                _check_str(k, shape)
        if d and level + 1 > shape.depth:
            shape.depth = level + 1
        if level > _DEEPEST:
            return None  # far past any limit: the depth alone refuses it
        if copy:
            return {k: _member(v, level, shape, True) for k, v in d.items()}
        for v in d.values():
            _member(v, level, shape, False)
        return None
    items: list[Any] = container
    if items and level + 1 > shape.depth:
        shape.depth = level + 1
    if level > _DEEPEST:
        return None
    if copy:
        return [_member(v, level, shape, True) for v in items]
    for v in items:
        _member(v, level, shape, False)
    return None


def inspect(value: Any) -> Shape:
    """Walk `value` once: its depth (the value itself is level 1) and any error."""
    return _inspect(value, False)[0]


def inspect_copy(value: Any) -> tuple[Shape, Any]:
    """`inspect(value)` and, in the same walk, a copy of `value`: new dicts
    and lists in the same key order, integral floats as integers, the
    immutable scalars shared. The copy is whole only if the shape has no
    error and a depth of at most MAX_DEPTH (64): below 101 levels the walk
    stops descending, and the copy holds None there."""
    return _inspect(value, True)


def _inspect(value: Any, copy: bool) -> tuple[Shape, Any]:
    shape = Shape()
    shape.depth = 1
    t = type(value)
    if t is dict or t is list:
        return shape, _walk(value, 1, shape, copy)
    if not (value is None or t is bool or (t is str and is_ascii(value))):
        if t is not int or not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            _check_scalar(value, shape)
            if copy and t is float and value.is_integer():
                return shape, int(value)
    return shape, value


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
    return "sha256:" + sha256(canonical_bytes(value)).hexdigest()


def link_hash(record_bytes: bytes, prev_hash: str) -> str:
    """The chain link: SHA-256(JCS(record) || prev_hash as UTF-8)."""
    h = sha256(record_bytes)
    h.update(prev_hash.encode("ascii"))
    return "sha256:" + h.hexdigest()
