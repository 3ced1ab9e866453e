"""Ed25519 point checks from first principles (RFC 8032 §5.1): what strict
verification adds to the `cryptography` package's.

OpenSSL (behind `cryptography`) checks RFC 8032's equation but takes a
small-order key or R: for the identity point as key, R = identity and S = 0
verify on every message. libsodium refuses those, and chapline refuses what
libsodium refuses:

- `weak_point(encoding)`: the encoding is not canonical (y >= p) or names a
  small-order point. A blocklist on y (the sign bit does not change the
  order): cheap enough for the R of every signature.
- `key_problem(encoding)`: why the encoding is not a point of the prime-order
  subgroup, i.e. not a key that Ed25519 key generation makes (libsodium's
  `crypto_core_ed25519_is_valid_point`), or None. It decodes the point and
  multiplies it by the group order in pure-Python integers: about a
  millisecond, paid once per key registered.
"""

from __future__ import annotations

__all__ = ["L", "P", "key_problem", "weak_point"]

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493  # the prime-order subgroup's order
_D = -121665 * pow(121666, -1, P) % P
_SQRT_M1 = pow(2, (P - 1) // 4, P)
_Y_BITS = (1 << 255) - 1

# The eight points of order dividing 8, by y (x is fixed by y up to its sign):
# 1 is the identity, p - 1 the point of order 2, 0 the two of order 4, and
# the four of order 8 have y = Y8 or p - Y8.
_Y8 = int.from_bytes(
    bytes.fromhex("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"), "little"
)
SMALL_ORDER_Y = frozenset({0, 1, P - 1, _Y8, P - _Y8})

_NOT_CANONICAL = "is not canonically encoded (its y is not below 2^255 - 19)"
_SMALL_ORDER = "is a small-order point, for which one fixed signature verifies on any message"

# A point in extended coordinates (X, Y, Z, T): x = X/Z, y = Y/Z, xy = T/Z.
_Point = tuple[int, int, int, int]
_IDENTITY: _Point = (0, 1, 1, 0)


def weak_point(encoding: bytes) -> str | None:
    """Why strict verification refuses this key or R encoding, or None."""
    y = int.from_bytes(encoding, "little") & _Y_BITS
    if y >= P:
        return _NOT_CANONICAL
    if y in SMALL_ORDER_Y:
        return _SMALL_ORDER
    return None


def key_problem(encoding: bytes) -> str | None:
    """Why `encoding` (32 bytes) is not a usable Ed25519 public key, or None."""
    point = _decode(encoding)
    if isinstance(point, str):
        return point
    if _is_identity(_multiply(8, point)):
        return _SMALL_ORDER
    if not _is_identity(_multiply(L, point)):
        return "has a small-order component (it is not in the prime-order subgroup)"
    return None


def _decode(encoding: bytes) -> _Point | str:
    """RFC 8032 §5.1.3, refusing the encodings it calls non-canonical."""
    n = int.from_bytes(encoding, "little")
    y, sign = n & _Y_BITS, n >> 255
    if y >= P:
        return _NOT_CANONICAL
    # x^2 = (y^2 - 1) / (d y^2 + 1); the denominator is never 0 (d is not a square)
    x2 = (y * y - 1) * pow(_D * y * y + 1, -1, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if x * x % P != x2:
        x = x * _SQRT_M1 % P
    if x * x % P != x2:
        return "is not a point on the curve"
    if x == 0 and sign:
        return "is not canonically encoded (x = 0 with the sign bit set)"
    if x & 1 != sign:
        x = P - x
    return (x, y, 1, x * y % P)


def _add(a: _Point, b: _Point) -> _Point:
    """RFC 8032 §5.1.4's addition: complete on this curve, so it doubles too."""
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    aa = (y1 - x1) * (y2 - x2) % P
    bb = (y1 + x1) * (y2 + x2) % P
    cc = 2 * _D * t1 * t2 % P
    dd = 2 * z1 * z2 % P
    e, f, g, h = bb - aa, dd - cc, dd + cc, bb + aa
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def _multiply(k: int, point: _Point) -> _Point:
    out = _IDENTITY
    while k:
        if k & 1:
            out = _add(out, point)
        point = _add(point, point)
        k >>= 1
    return out


def _is_identity(point: _Point) -> bool:
    x, y, z, _ = point
    return x % P == 0 and (y - z) % P == 0
