"""security-signed/1.0 signatures: signing for clients, verification with key history.

A signature covers the JCS bytes of the envelope without its `sig` member and
travels as the top-level string `sig = "ed25519:<kid>:<base64>"` (standard
base64 with padding, as the CHAP reference writes it). Keys are Ed25519 JWKs
(`{"kty": "OKP", "crv": "Ed25519", "x": <base64url>}`).

A member's keys are a history of records `{jwk, kid, valid_from, valid_until,
revoked_at, revoked_reason}` whose times are the coordinator's. Two questions
are asked of it:

- may this call be accepted now? (`key_for_call`): the key named by the kid
  must be current by the coordinator's clock when the call arrives: not
  revoked (-32072), not rotated out and already valid (-32071). The sender's
  `ts` is not used to choose the key: it is the sender's claim, and a key
  chosen by it could be backdated or refused for a lagging clock.
- did this key sign this entry? (`key_at`): the key named by the kid that was
  valid when the entry arrived, so an old entry verifies with the key of its
  time even after rotation or a later revocation.
"""

from __future__ import annotations

import base64
import binascii
import functools
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from coordinator.canonical import CanonicalError, canonical_bytes
from coordinator.errors import ChaplineError
from coordinator.wire import (  # re-exported: raised by the checks here
    SIG_KEY_NOT_FOUND,
    SIG_KEY_REVOKED,
    SIG_ROTATION_KEY_MISMATCH,
    SIG_VERIFY_FAILED,
)

__all__ = [
    "SIG_VERIFY_FAILED",
    "SIG_KEY_NOT_FOUND",
    "SIG_KEY_REVOKED",
    "SIG_ROTATION_KEY_MISMATCH",
    "SignatureError",
    "key_at",
    "key_for_call",
    "parse_sig",
    "public_jwk",
    "public_key_from_jwk",
    "sign_envelope",
    "signing_bytes",
    "verify_envelope",
    "verify_recorded",
]

_SCHEME = "ed25519"


class SignatureError(ChaplineError, ValueError):
    """A signature that cannot be accepted; `code` is its CHAP error code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def signing_bytes(envelope: dict[str, Any]) -> bytes:
    """What a signature covers: the JCS bytes of the envelope without `sig`.

    Raises CanonicalError when the envelope has no canonical form (a
    non-integer number, an integer beyond 2**53-1, a lone surrogate).
    """
    return canonical_bytes({k: v for k, v in envelope.items() if k != "sig"})


def _private_key(key: Ed25519PrivateKey | bytes) -> Ed25519PrivateKey:
    if isinstance(key, Ed25519PrivateKey):
        return key
    if isinstance(key, (bytes, bytearray)) and len(key) == 32:
        return Ed25519PrivateKey.from_private_bytes(bytes(key))
    raise TypeError("private_key must be an Ed25519PrivateKey or its 32-byte raw seed")


def sign_envelope(
    envelope: dict[str, Any], private_key: Ed25519PrivateKey | bytes, kid: str
) -> dict[str, Any]:
    """A copy of `envelope` with `sig` set: Ed25519 over its JCS form without `sig`.

    `kid` must name the key as the signer registered it (`participant.join`
    `jwks`, or `participant.rotate_key` `new_jwk`). Any `sig` already present
    is replaced. Put `ts` (and everything else) in `params` before signing:
    a change after signing breaks the signature.
    """
    if not isinstance(kid, str) or not kid or ":" in kid:
        raise ValueError("kid must be a non-empty string without ':' (the tag separator)")
    signature = _private_key(private_key).sign(signing_bytes(envelope))
    signed = {k: v for k, v in envelope.items() if k != "sig"}
    signed["sig"] = f"{_SCHEME}:{kid}:{base64.b64encode(signature).decode('ascii')}"
    return signed


def public_jwk(key: Ed25519PrivateKey | Ed25519PublicKey | bytes, kid: str) -> dict[str, str]:
    """The JWK to register for a key (pass the private key, its public half, or
    the 32-byte raw seed), e.g. in `participant.join` `jwks.keys`."""
    if isinstance(key, Ed25519PublicKey):
        public = key
    else:
        public = _private_key(key).public_key()
    raw = public.public_bytes(Encoding.Raw, PublicFormat.Raw)
    x = base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")
    return {"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": x}


def public_key_from_jwk(jwk: Any) -> Ed25519PublicKey:
    """The Ed25519 public key of a JWK; SignatureError(-32071) if it is not one."""
    if not isinstance(jwk, dict) or jwk.get("kty") != "OKP" or jwk.get("crv") != "Ed25519":
        raise SignatureError(SIG_KEY_NOT_FOUND, "The registered key is not an Ed25519 OKP JWK")
    x = jwk.get("x")
    key = _public_key(x) if isinstance(x, str) else None
    if key is None:
        raise SignatureError(
            SIG_KEY_NOT_FOUND, "The registered key's x is not a 32-byte base64url Ed25519 key"
        )
    return key


@functools.lru_cache(maxsize=1024)
def _public_key(x: str) -> Ed25519PublicKey | None:
    """The key of a JWK's `x` (cached: every signed call of a member needs it)."""
    try:
        return Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4)))
    except (ValueError, binascii.Error):
        return None


def parse_sig(sig: Any) -> tuple[str, bytes]:
    """`(kid, signature)` from an `ed25519:<kid>:<base64>` tag; SignatureError(-32070)."""
    if not isinstance(sig, str):
        raise SignatureError(SIG_VERIFY_FAILED, "Missing top-level `sig` field")
    parts = sig.split(":", 2)
    if len(parts) != 3 or parts[0] != _SCHEME or not parts[1]:
        raise SignatureError(
            SIG_VERIFY_FAILED, "Malformed signature tag: expected ed25519:<kid>:<base64 signature>"
        )
    try:
        signature = binascii.a2b_base64(parts[2].encode("ascii"), strict_mode=True)
    except (ValueError, binascii.Error):
        signature = b""
    if len(signature) != 64:
        raise SignatureError(
            SIG_VERIFY_FAILED,
            "Signature failed verification: the signature is not 64 bytes in padded base64",
        )
    return parts[1], signature


def verify_envelope(
    envelope: dict[str, Any], public_key: Ed25519PublicKey, message: bytes | None = None
) -> None:
    """Check `envelope["sig"]` against `public_key`; SignatureError(-32070) if it
    fails. `message` is `signing_bytes(envelope)` when the caller has it already."""
    _, signature = parse_sig(envelope.get("sig"))
    try:
        public_key.verify(signature, signing_bytes(envelope) if message is None else message)
    except (InvalidSignature, CanonicalError):
        raise SignatureError(SIG_VERIFY_FAILED, "Signature failed verification") from None


def _named(keys: list[dict[str, Any]], kid: str) -> list[dict[str, Any]]:
    return [k for k in keys if k.get("kid") == kid]


def key_for_call(
    keys: list[dict[str, Any]], kid: str, arrived: str, owner: str
) -> dict[str, Any]:
    """The key record that may sign a call arriving at `arrived` (coordinator time).

    -32072 when the key is revoked; -32071 when the member has no such key, or
    it was rotated out (valid_until <= arrived), or it is not valid yet.
    """
    named = _named(keys, kid)
    if not named:
        raise SignatureError(SIG_KEY_NOT_FOUND, f"No key {kid} for {owner}")
    for record in named:
        if record.get("revoked_at") is not None:
            raise SignatureError(SIG_KEY_REVOKED, f"Key {kid} is revoked")
    for record in named:
        until = record.get("valid_until")
        if until is not None and until <= arrived:
            raise SignatureError(
                SIG_KEY_NOT_FOUND,
                f"Key {kid} is no longer valid (rotated out at {until}); sign with the current key",
            )
    for record in named:
        if record.get("valid_from", "") <= arrived:
            return record
    raise SignatureError(SIG_KEY_NOT_FOUND, f"Key {kid} of {owner} is not valid yet at {arrived}")


def key_at(keys: list[dict[str, Any]], kid: str, at: str) -> dict[str, Any] | None:
    """The key record named `kid` that was valid at `at` (an entry's `arrived`):
    valid_from <= at < valid_until, and not revoked at or before `at`."""
    for record in _named(keys, kid):
        until = record.get("valid_until")
        revoked = record.get("revoked_at")
        if (
            record.get("valid_from", "") <= at
            and (until is None or at < until)
            and (revoked is None or at < revoked)
        ):
            return record
    return None


def verify_recorded(envelope: dict[str, Any], keys: list[dict[str, Any]], arrived: str) -> str:
    """Check a recorded signed envelope against the key its signer held when it
    arrived; returns the kid, or raises SignatureError (-32071 no key valid
    then, -32070 the signature does not verify)."""
    kid, _ = parse_sig(envelope.get("sig"))
    record = key_at(keys, kid, arrived)
    if record is None:
        raise SignatureError(SIG_KEY_NOT_FOUND, f"No key {kid} was valid at {arrived}")
    verify_envelope(envelope, public_key_from_jwk(record.get("jwk")))
    return kid
