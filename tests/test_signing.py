"""security-signed signatures: the client helper, the tag, key history, and
agreement with independent implementations (PyNaCl for Ed25519, rfc8785 for
JCS) and with chap-coordinator 0.3.3's own sign/verify."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import chap_coordinator
import nacl.exceptions
import nacl.signing
import pytest
import rfc8785
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import public_jwk, sign_envelope
from coordinator.errors import SignatureError
from coordinator.security.signing import (
    SIG_KEY_NOT_FOUND,
    SIG_KEY_REVOKED,
    SIG_VERIFY_FAILED,
    key_at,
    key_for_call,
    parse_sig,
    public_key_from_jwk,
    signing_bytes,
    verify_envelope,
    verify_recorded,
)

VECTORS = json.loads((Path(__file__).parent / "vectors" / "signature-vectors.json").read_text())
RFC8032_SEED = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
RFC8032_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
RFC8032_SIG_EMPTY = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155"
    "5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


def _nacl_verify(jwk: dict[str, str], message: bytes, sig: str) -> None:
    raw = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
    _, _, b64 = sig.split(":", 2)
    nacl.signing.VerifyKey(raw).verify(message, base64.b64decode(b64, validate=True))


def _env(**params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": "r1", "method": "task.create", "params": params}


# -- vectors ------------------------------------------------------------------


def test_rfc8032_vector_1_with_our_key_handling_and_pynacl() -> None:
    jwk = public_jwk(RFC8032_SEED, "k")
    assert base64.urlsafe_b64decode(jwk["x"] + "=") == RFC8032_PUBLIC
    ours = Ed25519PrivateKey.from_private_bytes(RFC8032_SEED).sign(b"")
    theirs = nacl.signing.SigningKey(RFC8032_SEED).sign(b"").signature
    assert ours == theirs == RFC8032_SIG_EMPTY


def test_upstream_signature_vector_has_a_wrong_tail() -> None:
    """The upstream vector "Ed25519 signing" prints RFC 8032 vector 1 with its
    last 10 bytes wrong (SPECIFICATION.md, "Test vectors"); the real signature
    is RFC 8032's and PyNaCl's."""
    upstream = bytes.fromhex(
        "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33b"
        "acc61e39701cf9b46bd25bf5f0595bdfa987599ce19a1c6d27"
    )
    assert upstream[:54] == RFC8032_SIG_EMPTY[:54] and upstream[54:] != RFC8032_SIG_EMPTY[54:]
    with pytest.raises(nacl.exceptions.BadSignatureError):
        nacl.signing.VerifyKey(RFC8032_PUBLIC).verify(b"", upstream)


def test_upstream_jcs_sample_is_not_canonical() -> None:
    """The upstream vector "JCS canonicalisation" (SPECIFICATION.md, "Test
    vectors") expects bytes that put "chap" after "from" with a space after
    its colon, and its sample holds 0.42, which CHAP's integer-only JCS
    refuses; rfc8785 puts "chap" first and hashes differently."""
    upstream = (
        '{"evidence":{"prev_hash":"sha256:' + "0" * 64 + '"},"from":"human:a","chap": "0.2",'
    )
    sample = {"chap": "0.2", "evidence": {"prev_hash": "sha256:" + "0" * 64}, "from": "human:a"}
    assert rfc8785.dumps(sample).decode() != upstream.rstrip(",") + "}"
    assert rfc8785.dumps(sample).startswith(b'{"chap":"0.2","evidence"')
    with pytest.raises(Exception, match="integer"):
        signing_bytes({"params": {"load": 0.42}})


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=lambda v: v["name"])
def test_generated_vectors(vector: dict[str, Any]) -> None:
    seed = bytes.fromhex(vector["seed_hex"])
    envelope = vector["envelope"]
    unsigned = {k: v for k, v in envelope.items() if k != "sig"}
    # independent: rfc8785 gives the canonical bytes, PyNaCl verifies the tag
    assert rfc8785.dumps(unsigned) == vector["canonical"].encode()
    _nacl_verify(vector["public_jwk"], vector["canonical"].encode(), vector["sig"])
    # ours reproduces the vector exactly (Ed25519 is deterministic)
    assert public_jwk(seed, vector["kid"]) == vector["public_jwk"]
    assert signing_bytes(envelope) == vector["canonical"].encode()
    assert sign_envelope(envelope, seed, vector["kid"])["sig"] == vector["sig"]


# -- the helper -----------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(max_size=8)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(params=st.dictionaries(st.text(max_size=6), json_value, max_size=5), seed=st.binary(min_size=32, max_size=32))
def test_signed_envelopes_verify_independently_and_tampering_breaks_them(
    params: dict[str, Any], seed: bytes
) -> None:
    envelope = _env(**params)
    before = copy.deepcopy(envelope)
    signed = sign_envelope(envelope, seed, "k1")
    assert envelope == before  # the caller's dict is left alone
    jwk = public_jwk(seed, "k1")
    _nacl_verify(jwk, rfc8785.dumps(envelope), signed["sig"])
    verify_envelope(signed, public_key_from_jwk(jwk))
    tampered = {**signed, "params": {**params, "tampered": True}}
    with pytest.raises(SignatureError) as err:
        verify_envelope(tampered, public_key_from_jwk(jwk))
    assert err.value.code == SIG_VERIFY_FAILED


def test_reference_verifies_our_signature_and_we_verify_its() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = _env(workspace="w", **{"from": "agent:bot"}, kind="k", input={"a": [1, "é"]})
    ours = sign_envelope(envelope, key, "kid-1")
    assert chap_coordinator.verify(signing_bytes(envelope), ours["sig"], key.public_key())
    theirs = {**envelope, "sig": chap_coordinator.sign(chap_coordinator.canonicalize(envelope), key, "kid-1")}
    assert theirs["sig"] == ours["sig"]
    verify_envelope(theirs, public_key_from_jwk(public_jwk(key, "kid-1")))


@pytest.mark.parametrize(
    "sig, message",
    [
        (None, "Missing top-level `sig`"),
        (5, "Missing top-level `sig`"),
        ("ed25519:k1", "Malformed signature tag"),
        ("rsa:k1:AAAA", "Malformed signature tag"),
        ("ed25519::AAAA", "Malformed signature tag"),
        ("ed25519:k1:!!!!", "not 64 bytes"),
        ("ed25519:k1:" + base64.b64encode(b"x" * 64).decode().rstrip("="), "not 64 bytes"),
        ("ed25519:k1:" + base64.b64encode(b"x" * 64).decode() + "x", "not 64 bytes"),
        ("ed25519:k1:" + base64.b64encode(b"x" * 63).decode(), "not 64 bytes"),
    ],
)
def test_malformed_tags_are_refused_with_32070(sig: Any, message: str) -> None:
    with pytest.raises(SignatureError, match=message) as err:
        parse_sig(sig)
    assert err.value.code == SIG_VERIFY_FAILED


def test_helper_refuses_bad_kids_and_keys() -> None:
    with pytest.raises(ValueError, match="kid"):
        sign_envelope(_env(), Ed25519PrivateKey.generate(), "a:b")
    with pytest.raises(TypeError, match="32-byte"):
        sign_envelope(_env(), b"short", "k")
    for jwk in ({"kty": "RSA"}, {"kty": "OKP", "crv": "Ed25519", "x": "AAAA"}, None):
        with pytest.raises(SignatureError) as err:
            public_key_from_jwk(jwk)
        assert err.value.code == SIG_KEY_NOT_FOUND


# -- key history ------------------------------------------------------------------


def _record(kid: str, key: Ed25519PrivateKey, frm: str, until: str | None = None, revoked: str | None = None) -> dict[str, Any]:
    return {
        "jwk": public_jwk(key, kid),
        "kid": kid,
        "valid_from": frm,
        "valid_until": until,
        "revoked_at": revoked,
        "revoked_reason": "compromise" if revoked else None,
    }


T0, T1, T2, T3 = (f"2026-01-01T00:00:0{i}.000Z" for i in range(4))


def test_key_for_call_judges_by_arrival_not_by_ts() -> None:
    k1, k2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys = [_record("k1", k1, T0, until=T2), _record("k2", k2, T2)]
    assert key_for_call(keys, "k1", T1, "human:a")["kid"] == "k1"
    assert key_for_call(keys, "k2", T2, "human:a")["kid"] == "k2"
    for kid, at, code in [("k1", T2, SIG_KEY_NOT_FOUND), ("k1", T3, SIG_KEY_NOT_FOUND), ("k3", T3, SIG_KEY_NOT_FOUND), ("k2", T1, SIG_KEY_NOT_FOUND)]:
        with pytest.raises(SignatureError) as err:
            key_for_call(keys, kid, at, "human:a")
        assert err.value.code == code
    revoked = [_record("k1", k1, T0, revoked=T3)]
    with pytest.raises(SignatureError) as err:
        key_for_call(revoked, "k1", T1, "human:a")
    assert err.value.code == SIG_KEY_REVOKED


def test_old_entries_verify_with_the_key_of_their_time() -> None:
    k1, k2 = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys = [_record("k1", k1, T0, until=T2, revoked=T3), _record("k2", k2, T2)]
    early = sign_envelope(_env(n=1), k1, "k1")
    late = sign_envelope(_env(n=2), k2, "k2")
    assert verify_recorded(early, keys, T1) == "k1"  # rotated out and later revoked
    assert verify_recorded(late, keys, T3) == "k2"
    assert key_at(keys, "k1", T2) is None and key_at(keys, "k2", T1) is None
    with pytest.raises(SignatureError) as err:
        verify_recorded(early, keys, T2)
    assert err.value.code == SIG_KEY_NOT_FOUND
    forged = {**sign_envelope(_env(n=1), k2, "k1")}
    with pytest.raises(SignatureError) as err:
        verify_recorded(forged, keys, T1)
    assert err.value.code == SIG_VERIFY_FAILED
