"""Keys and signatures fail closed (SPECIFICATION.md, "Key lifecycle").

- Strict Ed25519 verification: on vectors built here from the eight
  small-order points and their non-canonical encodings (the edge cases of
  "Taming the many EdDSAs" and of C2SP's CCTV set), mixed-order keys and
  S >= L, chapline's verdict is libsodium's `crypto_sign_verify_detached`
  (PyNaCl), while `cryptography` alone accepts some of them.
- Registration: a key offered at `participant.join` or `participant.rotate_key`
  is registered exactly when libsodium's `crypto_core_ed25519_is_valid_point`
  takes its `x`, and a JWK that is not a public Ed25519 OKP key with a usable
  kid is refused -32602 naming the field, with nothing recorded.
- A member whose small-order key was registered by chap-coordinator 0.3.3
  (which takes any key) cannot be impersonated with a fixed signature.

The curve arithmetic below only builds inputs; every verdict is libsodium's.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import nacl.bindings
import nacl.exceptions
import nacl.signing
import pytest
from chap_coordinator import Coordinator as Reference
from chap_coordinator.storage.sqlite import SqliteStore as ReferenceSqlite
from client import Client, refused
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from hypothesis import given
from hypothesis import strategies as st
from support import make

from coordinator import Coordinator, CounterIds, StepClock, public_jwk, sign_envelope
from coordinator.errors import SignatureError
from coordinator.security.signing import verify_envelope, verify_recorded
from storage import SqliteStore

# -- edwards25519 (RFC 8032 §5.1), affine, to build inputs ----------------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, -1, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)
IDENTITY = (0, 1)
Point = tuple[int, int]


def add(a: Point, b: Point) -> Point:
    (x1, y1), (x2, y2) = a, b
    t = D * x1 * x2 * y1 * y2 % P
    return (x1 * y2 + x2 * y1) * pow(1 + t, -1, P) % P, (y1 * y2 + x1 * x2) * pow(1 - t, -1, P) % P


def mul(k: int, a: Point) -> Point:
    out = IDENTITY
    while k:
        if k & 1:
            out = add(out, a)
        a, k = add(a, a), k >> 1
    return out


def neg(a: Point) -> Point:
    return -a[0] % P, a[1]


def raw(y: int, sign: int) -> bytes:
    """An encoding as written, canonical or not."""
    return (y | sign << 255).to_bytes(32, "little")


def encode(a: Point) -> bytes:
    return raw(a[1], a[0] & 1)


def decode(encoding: bytes) -> Point | None:
    """The point an encoding names, reading y modulo p as decoders do."""
    n = int.from_bytes(encoding, "little")
    y, sign = (n & ((1 << 255) - 1)) % P, n >> 255
    x2 = (y * y - 1) * pow(D * y * y + 1, -1, P) % P
    x = pow(x2, (P + 3) // 8, P)
    if x * x % P != x2:
        x = x * SQRT_M1 % P
    if x * x % P != x2:
        return None
    return (P - x if x and (x & 1) != sign else x), y


def order_8() -> Point:
    """A point of order 8 (its encoding is a well-known constant; checked here)."""
    t = decode(bytes.fromhex("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a"))
    assert t is not None and mul(4, t) != IDENTITY and mul(8, t) == IDENTITY
    return t


T8 = order_8()
B = decode(raw(4 * pow(5, -1, P) % P, 0))
assert B is not None and encode(B) == nacl.bindings.crypto_scalarmult_ed25519_base_noclamp(
    (1).to_bytes(32, "little")
)

# The eight small-order points, then their six other encodings: y + p for the
# points whose y is 0 or 1 (either sign bit), and the sign bit set where x = 0.
SMALL_ORDER = [encode(mul(k, T8)) for k in range(8)] + [
    raw(P, 0), raw(P, 1), raw(P + 1, 0), raw(P + 1, 1), raw(1, 1), raw(P - 1, 1),
]
assert len(set(SMALL_ORDER)) == 14


def b64u(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def h(r: bytes, a: bytes, message: bytes) -> int:
    return int.from_bytes(hashlib.sha512(r + a + message).digest(), "little") % L


def scalar(seed: bytes) -> int:
    """The secret scalar of an RFC 8032 seed (clamped)."""
    digest = bytearray(hashlib.sha512(seed).digest()[:32])
    digest[0] &= 248
    digest[31] = (digest[31] & 127) | 64
    return int.from_bytes(digest, "little")


def public(seed: bytes) -> bytes:
    return nacl.signing.SigningKey(seed).verify_key.encode()


def signature(r: bytes, s: int) -> bytes:
    return r + s.to_bytes(32, "little")


# -- the vectors -----------------------------------------------------------------

Vector = tuple[str, bytes, bytes, bytes]  # label, A, signature, message


def _small_small() -> list[Vector]:
    """Every small-order A with every small-order R and S = 0, with a message
    whose h makes the cofactorless equation hold where one of 32 does."""
    out = []
    for i, a in enumerate(SMALL_ORDER):
        point = decode(a)
        assert point is not None
        for j, r in enumerate(SMALL_ORDER):
            message = next(
                (m for m in (b"small %d" % n for n in range(32))
                 if encode(neg(mul(h(r, a, m) % 8, point))) == r),
                b"small 0",
            )
            out.append((f"A small #{i}, R small #{j}, S = 0", a, signature(r, 0), message))
    return out


def _honest_key() -> list[Vector]:
    seed = bytes(range(32))
    a, secret = public(seed), scalar(seed)
    good = nacl.signing.SigningKey(seed).sign(b"hello").signature
    s = int.from_bytes(good[32:], "little")
    out = [
        ("honest", a, good, b"hello"),
        ("honest, another message", a, good, b"hullo"),
        ("honest, S + L", a, signature(good[:32], s + L), b"hello"),
    ]
    for j, r in enumerate(SMALL_ORDER):
        # S = h*a makes [S]B - [h]A the identity: only R = identity, written
        # canonically, passes the cofactorless comparison
        message = b"small R %d" % j
        out.append((f"honest A, R small #{j}", a, signature(r, h(r, a, message) * secret % L), message))
    return out


def _mixed_order_key() -> list[Vector]:
    """A = aB + T8 signs honestly; the cofactorless equation holds exactly
    when h is a multiple of 8."""
    seed = bytes(range(1, 33))
    secret = scalar(seed)
    a_point = add(mul(secret, B), T8)  # type: ignore[arg-type]
    a = encode(a_point)
    out = []
    for n in range(64):
        message = b"mixed %d" % n
        nonce = int.from_bytes(hashlib.sha512(b"nonce" + message).digest(), "little") % L
        r = encode(mul(nonce, B))  # type: ignore[arg-type]
        k = h(r, a, message)
        out.append((f"mixed-order A, h mod 8 = {k % 8}", a, signature(r, (nonce + k * secret) % L), message))
    return out


def _non_canonical_keys() -> list[Vector]:
    """y + p for the y below 19 that are on the curve and not small order."""
    good = nacl.signing.SigningKey(bytes(32)).sign(b"m").signature
    return [
        (f"A = {y} + p (sign {sign})", raw(y + P, sign), good, b"m")
        for y in range(2, 19) for sign in (0, 1) if decode(raw(y, sign)) is not None
    ]


@cache
def vectors() -> list[Vector]:
    return _small_small() + _honest_key() + _mixed_order_key() + _non_canonical_keys()


def libsodium_accepts(a: bytes, sig: bytes, message: bytes) -> bool:
    try:
        nacl.signing.VerifyKey(a).verify(message, sig)
    except nacl.exceptions.BadSignatureError:
        return False
    return True


def cryptography_accepts(a: bytes, sig: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(a).verify(sig, message)
    except InvalidSignature:
        return False
    return True


def chapline_accepts(a: bytes, sig: bytes, message: bytes) -> bool:
    envelope = {"sig": "ed25519:k:" + base64.b64encode(sig).decode("ascii")}
    try:
        verify_envelope(envelope, Ed25519PublicKey.from_public_bytes(a), message)
    except SignatureError as exc:
        assert exc.code == -32070 and exc.message.startswith("Signature failed verification")
        return False
    return True


def test_verification_agrees_with_libsodium_on_the_edge_cases() -> None:
    disagreements = [
        (label, libsodium_accepts(a, sig, m))
        for label, a, sig, m in vectors()
        if chapline_accepts(a, sig, m) != libsodium_accepts(a, sig, m)
    ]
    assert disagreements == []


def test_the_vectors_have_teeth() -> None:
    """Both verdicts occur, and `cryptography`'s plain verification accepts
    signatures libsodium refuses (a small-order key, a small-order R)."""
    verdicts = [(libsodium_accepts(a, s, m), cryptography_accepts(a, s, m), label) for label, a, s, m in vectors()]
    assert any(sodium for sodium, _, _ in verdicts) and not all(sodium for sodium, _, _ in verdicts)
    lax = [label for sodium, plain, label in verdicts if plain and not sodium]
    assert any(label.startswith("A small") for label in lax)
    assert any(label.startswith("honest A, R small") for label in lax)
    accepted_mixed = [label for sodium, _, label in verdicts if sodium and label.startswith("mixed")]
    assert accepted_mixed and all(label.endswith("= 0") for label in accepted_mixed)


# -- registration ------------------------------------------------------------------

def joiner() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Each call joins a new member to one workspace with the given JWK."""
    c = Client(make())
    c.ok("workspace.create")
    count = iter(range(10**9))

    def join(jwk: dict[str, Any]) -> dict[str, Any]:
        return c.call("participant.join", frm=f"human:m{next(count)}", type="human", jwks={"keys": [jwk]})

    return join


def _mixed(seed: bytes, k: int) -> bytes:
    a = decode(public(seed))
    assert a is not None
    return encode(add(a, mul(k, T8)))


KEY_BYTES = st.one_of(
    st.binary(min_size=32, max_size=32),
    st.binary(min_size=32, max_size=32).map(public),
    st.tuples(st.binary(min_size=32, max_size=32), st.integers(1, 7)).map(lambda t: _mixed(*t)),
    st.sampled_from(SMALL_ORDER),
    st.tuples(st.integers(P, 2**255 - 1), st.integers(0, 1)).map(lambda t: raw(*t)),
)


@given(KEY_BYTES)
def test_a_key_is_registered_exactly_when_libsodium_calls_it_a_valid_point(key: bytes) -> None:
    answer = joiner()({"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": b64u(key)})
    if nacl.bindings.crypto_core_ed25519_is_valid_point(key):
        assert answer["result"]["joined"] is True
    else:
        refused(answer, -32602)
        assert answer["error"]["data"] == {"field": "jwks.keys[0].x"}
        assert "jwks.keys[0].x" in answer["error"]["message"]


def test_every_small_order_and_non_canonical_encoding_is_refused() -> None:
    join = joiner()
    encodings = SMALL_ORDER + [raw(y + P, s) for y in range(2, 19) for s in (0, 1)]
    for key in encodings:
        assert not nacl.bindings.crypto_core_ed25519_is_valid_point(key)
        answer = join({"kty": "OKP", "crv": "Ed25519", "kid": "k1", "x": b64u(key)})
        refused(answer, -32602)


GOOD = public_jwk(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), "k2")
IDENTITY_X = b64u(b"\x01" + bytes(31))
PRIVATE = Ed25519PrivateKey.from_private_bytes(bytes(32))

# (label, the offered JWK, the member it is refused at, a word the message must hold)
BAD_JWKS: list[tuple[str, Any, str, str]] = [
    ("not an object", "k2", "", "object"),
    ("private member d", {**GOOD, "d": b64u(bytes(32))}, "d", "private"),
    ("kty RSA", {**GOOD, "kty": "RSA"}, "kty", "OKP"),
    ("no kty", {k: v for k, v in GOOD.items() if k != "kty"}, "kty", "OKP"),
    ("crv X25519", {**GOOD, "crv": "X25519"}, "crv", "Ed25519"),
    ("no kid", {k: v for k, v in GOOD.items() if k != "kid"}, "kid", "string"),
    ("kid an integer", {**GOOD, "kid": 5}, "kid", "string"),
    ("empty kid", {**GOOD, "kid": ""}, "kid", "empty"),
    ("kid with ':'", {**GOOD, "kid": "a:b"}, "kid", "':'"),
    ("kid of 257 characters", {**GOOD, "kid": "k" * 257}, "kid", "256"),
    ("kid with a newline", {**GOOD, "kid": "k\n1"}, "kid", "control"),
    ("no x", {k: v for k, v in GOOD.items() if k != "x"}, "x", "base64url"),
    ("x an integer", {**GOOD, "x": 5}, "x", "base64url"),
    ("x not base64url", {**GOOD, "x": "!" * 43}, "x", "base64url"),
    ("x padded", {**GOOD, "x": GOOD["x"] + "="}, "x", "base64url"),
    ("x standard base64", {**GOOD, "x": base64.b64encode(bytes([251]) * 32).decode().rstrip("=")}, "x", "base64url"),
    ("x with stray bits", {**GOOD, "x": GOOD["x"][:-1] + chr(ord(GOOD["x"][-1]) + 1)}, "x", "base64url"),
    ("x of 16 bytes", {**GOOD, "x": b64u(bytes(16))}, "x", "32"),
    ("x the identity point", {**GOOD, "x": IDENTITY_X}, "x", "small-order"),
    ("x of order 8", {**GOOD, "x": b64u(SMALL_ORDER[1])}, "x", "small-order"),
    ("x non-canonical", {**GOOD, "x": b64u(raw(P + 1, 0))}, "x", "canonical"),
    ("x off the curve", {**GOOD, "x": b64u(raw(2, 0))}, "x", "curve"),
    ("x of mixed order", {**GOOD, "x": b64u(_mixed(bytes(range(32)), 3))}, "x", "small-order component"),
]


def _field(prefix: str, member: str) -> str:
    return f"{prefix}.{member}" if member else prefix


def test_the_bad_keys_are_bad() -> None:
    """Every 32-byte `x` refused above is refused by libsodium too; GOOD is taken."""
    assert nacl.bindings.crypto_core_ed25519_is_valid_point(base64.urlsafe_b64decode(GOOD["x"] + "="))
    points = [jwk["x"] for _, jwk, _, word in BAD_JWKS if word in ("small-order", "canonical", "curve", "small-order component")]
    assert len(points) == 5
    for x in points:
        assert not nacl.bindings.crypto_core_ed25519_is_valid_point(base64.urlsafe_b64decode(x + "=")), x


def _ws(c: Client) -> tuple[int, list[dict[str, Any]]]:
    d = c.describe()
    return d["audit_count"], d["members"]


@pytest.mark.parametrize("label, jwk, member, word", BAD_JWKS, ids=[case[0] for case in BAD_JWKS])
def test_join_refuses_a_bad_key_naming_the_field(label: str, jwk: Any, member: str, word: str) -> None:
    c = Client(make())
    c.setup(("human:alice",))
    before = _ws(c)
    error = c.fail(-32602, "participant.join", frm="human:bob", type="human", jwks={"keys": [GOOD, jwk]})
    field = _field("jwks.keys[1]", member)
    assert error["data"] == {"field": field}, error
    assert error["message"].startswith(field) and word in error["message"], error["message"]
    assert _ws(c) == before
    # a re-join's self-asserted keys are not registered, but the call is recorded: refused too
    error = c.fail(-32602, "participant.join", frm="human:alice", type="human", jwks={"keys": [jwk]})
    assert error["data"] == {"field": _field("jwks.keys[0]", member)}
    assert _ws(c) == before


@pytest.mark.parametrize("label, jwk, member, word", BAD_JWKS, ids=[case[0] for case in BAD_JWKS])
def test_rotation_refuses_a_bad_key_naming_the_field(label: str, jwk: Any, member: str, word: str) -> None:
    c = Client(make())
    c.setup(("human:alice",))
    c.ok("participant.join", frm="human:bob", type="human", jwks={"keys": [public_jwk(PRIVATE, "k1")]})
    before = _ws(c)
    error = c.fail(-32602, "participant.rotate_key", frm="human:bob", old_kid="k1", new_jwk=jwk)
    field = _field("new_jwk", member)
    assert error["data"] == {"field": field}, error
    assert error["message"].startswith(field) and word in error["message"], error["message"]
    assert _ws(c) == before


@pytest.mark.parametrize(
    "jwks, field",
    [
        ("keys", "jwks"),
        ({}, "jwks.keys"),
        ({"keys": GOOD}, "jwks.keys"),
        ({"keys": [GOOD, {**GOOD, "x": public_jwk(PRIVATE, "k")["x"]}]}, "jwks.keys[1].kid"),
        ({"keys": [{**GOOD, "kid": f"k{i}"} for i in range(17)]}, "jwks.keys"),
    ],
    ids=["jwks a string", "no keys", "keys an object", "a kid twice", "17 keys"],
)
def test_join_refuses_a_malformed_key_set(jwks: Any, field: str) -> None:
    c = Client(make(), "wsp_new")
    error = c.fail(-32602, "participant.join", frm="human:bob", type="human", jwks=jwks)
    assert error["data"] == {"field": field}, error
    # nothing was created: not the member, not the workspace the join would have made
    c.fail(-32602, "workspace.describe", frm="human:bob")


def test_a_join_registers_up_to_16_keys() -> None:
    c = Client(make())
    c.setup(("human:alice",))
    keys = [{**GOOD, "kid": f"k{i}"} for i in range(16)]
    c.ok("participant.join", frm="human:bob", type="human", jwks={"keys": keys})
    assert c.describe()["members"][-1]["jwks"] == {"keys": keys}


def test_a_rotation_may_not_reuse_a_kid() -> None:
    """A kid names one key for good: reusing one (even the old key's) would
    leave two records under it, and the call could never be signed again."""
    c = Client(make())
    c.setup(("human:alice",))
    c.ok("participant.join", frm="human:bob", type="human", jwks={"keys": [public_jwk(PRIVATE, "k1")]})
    c.ok("participant.rotate_key", frm="human:bob", old_kid="k1", new_jwk=GOOD)  # k2
    for kid in ("k1", "k2"):
        error = c.fail(-32602, "participant.rotate_key", frm="human:bob", old_kid="k2", new_jwk={**GOOD, "kid": kid})
        assert error["data"] == {"field": "new_jwk.kid"}
        assert kid in error["message"]


def test_a_good_key_is_registered_as_0_3_3_registers_it() -> None:
    """The check refuses only what is bad: a real key joins and rotates with
    the same entries and key history as chap-coordinator 0.3.3 gives."""
    runs = []
    for coord in (make(), Reference(deterministic_ids=True, deterministic_clock=True)):
        c = Client(coord)
        c.setup(("human:alice",))
        c.ok("participant.join", frm="human:bob", type="human", jwks={"keys": [public_jwk(PRIVATE, "k1")]})
        c.ok("participant.rotate_key", frm="human:bob", old_kid="k1", new_jwk={**GOOD, "use": "sig"})
        runs.append(([e.get("envelope") for e in c.log()], c.describe()["members"]))
    assert runs[0] == runs[1]


# -- a small-order key registered elsewhere --------------------------------------------

FORGED = signature(raw(1, 0), 0)  # R = identity, S = 0: "valid" for A = identity, any message


def test_a_small_order_key_registered_by_0_3_3_cannot_sign(tmp_path: Path) -> None:
    """0.3.3 registers the identity point and accepts one fixed signature on
    any envelope from it; on the same file chapline refuses that signature,
    and refuses the entries 0.3.3 recorded with it when verifying history."""
    path = str(tmp_path / "chap.db")
    alice = Ed25519PrivateKey.generate()
    store = ReferenceSqlite(path)
    ref = Reference(require_signatures=True, deterministic_ids=True, deterministic_clock=True, store=store)
    c = Client(ref, "wsp_k")
    c.ok("workspace.create")
    c.ok("participant.join", frm="human:alice", type="human", role="admin", jwks={"keys": [public_jwk(alice, "a1")]})
    c.ok("participant.join", frm="human:eve", type="human", jwks={"keys": [{**GOOD, "kid": "e1", "x": IDENTITY_X}]})

    def forged(side: Client, **params: Any) -> dict[str, Any]:
        envelope = side.envelope("task.create", frm="human:eve", assignee="human:alice", kind="k", input=params)
        envelope["sig"] = "ed25519:e1:" + base64.b64encode(FORGED).decode("ascii")
        return side.send(envelope)

    assert forged(c, n=1)["result"]["state"] == "created"  # 0.3.3: anyone may sign as eve
    store.close()

    ours = Client(Coordinator(store=SqliteStore(path), clock=StepClock(start_ms=1_900_000_000_000),
                              ids=CounterIds(), require_signatures=True), "wsp_k")
    ours.n = 100
    answer = forged(ours, n=2)
    refused(answer, -32070)
    assert "small-order" in answer["error"]["message"]
    # the history: eve's recorded call does not verify with her key
    read = sign_envelope(ours.envelope("audit.read", frm="human:alice"), alice, "a1")
    entries = ours.send(read)["result"]["entries"]
    eve = next(m for m in ours.send(sign_envelope(ours.envelope("workspace.describe", frm="human:alice"), alice, "a1"))
               ["result"]["members"] if m["uri"] == "human:eve")
    recorded = entries[-1]
    assert recorded["envelope"]["params"]["from"] == "human:eve"
    with pytest.raises(SignatureError) as caught:
        verify_recorded(recorded["envelope"], eve["key_history"], recorded["arrived"])
    assert caught.value.code == -32070
    ours.target.close()
