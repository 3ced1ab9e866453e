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

Verification is strict, as libsodium's: besides RFC 8032's equation, a
signature is refused when its key A or its R is a small-order point or not
canonically encoded, or its S is not below the group order L. Without that, a
member who registered a small-order key (the identity point, say) has a fixed
signature that verifies on every envelope, which anyone can send.

A key is registered (`check_jwk`, at join and rotation) only when it is a
public Ed25519 JWK whose `x` is a canonical point of the prime-order subgroup
(what libsodium's `crypto_core_ed25519_is_valid_point` takes) and whose kid
can appear in a signature tag.

Signing and verifying need chapline[crypto] (cryptography), imported when
first used; reading tags and checking keys and their history do not.
"""

from __future__ import annotations

import base64
import binascii
import functools
import re
from typing import TYPE_CHECKING, Any

from coordinator.engine.canonical import canonical_bytes
from coordinator.engine.limits import MAX_ID_CHARS
from coordinator.engine.wire import (  # re-exported: raised by the checks here
    SIG_KEY_NOT_FOUND,
    SIG_KEY_REVOKED,
    SIG_ROTATION_KEY_MISMATCH,
    SIG_VERIFY_FAILED,
)
from coordinator.errors import CanonicalError, JwkError, SignatureError
from coordinator.extras import needs
from coordinator.security.ed25519 import L, key_problem, weak_point

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "SIG_VERIFY_FAILED",
    "SIG_KEY_NOT_FOUND",
    "SIG_KEY_REVOKED",
    "SIG_ROTATION_KEY_MISMATCH",
    "check_jwk",
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


def signing_bytes(envelope: dict[str, Any]) -> bytes:
    """What a signature covers: the JCS bytes of the envelope without `sig`.

    Raises CanonicalError when the envelope has no canonical form (a
    non-integer number, an integer beyond 2**53-1, a lone surrogate).
    """
    return canonical_bytes({k: v for k, v in envelope.items() if k != "sig"})


def _private_key(key: Ed25519PrivateKey | bytes) -> Ed25519PrivateKey:
    with needs("crypto"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

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
    with needs("crypto"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

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
    with needs("crypto"):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        return Ed25519PublicKey.from_public_bytes(base64.urlsafe_b64decode(x + "=" * (-len(x) % 4)))
    except (ValueError, binascii.Error):
        return None


# A JWK's x as RFC 8037 writes it: 32 bytes, base64url without padding.
_X = re.compile(r"[A-Za-z0-9_-]{43}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_jwk(jwk: Any, field: str) -> dict[str, Any]:
    """`jwk` if it may be registered as a member's signing key, else JwkError
    naming the member of `field` (the JWK's place in the params) at fault."""
    if not isinstance(jwk, dict):
        raise JwkError(field, "must be a JWK object: {kty: OKP, crv: Ed25519, kid, x}")
    if "d" in jwk:
        raise JwkError(
            f"{field}.d",
            "is the private key: register only the public key (without d); "
            "the key has left its holder, so replace it with a new one",
        )
    if jwk.get("kty") != "OKP":
        raise JwkError(f"{field}.kty", f'must be "OKP" (an Ed25519 key, RFC 8037), not {jwk.get("kty")!r}')
    if jwk.get("crv") != "Ed25519":
        raise JwkError(f"{field}.crv", f'must be "Ed25519", not {jwk.get("crv")!r}')
    _check_kid(jwk.get("kid"), f"{field}.kid")
    x = jwk.get("x")
    raw = _x_bytes(x) if isinstance(x, str) else None
    if raw is None:
        raise JwkError(
            f"{field}.x", "must be the 32-byte public key in base64url without padding (43 characters)"
        )
    problem = key_problem(raw)
    if problem is not None:
        raise JwkError(
            f"{field}.x", f"{problem}: not a key Ed25519 key generation makes; register a generated key"
        )
    return jwk


def _check_kid(kid: Any, field: str) -> None:
    """A kid travels in `sig` tags (`ed25519:<kid>:...`) and is quoted in messages."""
    if not isinstance(kid, str):
        raise JwkError(field, 'must be a string naming the key, such as "alice-1"')
    if not kid:
        raise JwkError(field, 'must not be empty; name the key, such as "alice-1"')
    if ":" in kid:
        raise JwkError(field, "must not contain ':', which separates the parts of a signature tag")
    if len(kid) > MAX_ID_CHARS or _CONTROL.search(kid):
        raise JwkError(
            field, f"must be printable text of at most {MAX_ID_CHARS} characters (no control characters)"
        )


def _x_bytes(x: str) -> bytes | None:
    """The key bytes of an `x` written canonically (no stray low bits), else None."""
    if not _X.fullmatch(x):
        return None
    raw = base64.urlsafe_b64decode(x + "=")
    return raw if base64.urlsafe_b64encode(raw)[:43].decode("ascii") == x else None


def _weak_signature(public: bytes, signature: bytes) -> str | None:
    """What strict verification refuses before the equation is checked: a
    weak key or R (coordinator/security/ed25519.py), or S not reduced below L."""
    problem = weak_point(public)
    if problem is not None:
        return f"the signer's key {problem}"
    problem = weak_point(signature[:32])
    if problem is not None:
        return f"the signature's R {problem}"
    if int.from_bytes(signature[32:], "little") >= L:
        return "the signature's S is not below the group order"
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
    """Check `envelope["sig"]` against `public_key`, strictly (see the module
    docstring); SignatureError(-32070) if it fails. `message` is
    `signing_bytes(envelope)` when the caller has it already."""
    with needs("crypto"):
        from cryptography.exceptions import InvalidSignature

    _, signature = parse_sig(envelope.get("sig"))
    weak = _weak_signature(public_key.public_bytes_raw(), signature)
    if weak is not None:
        raise SignatureError(SIG_VERIFY_FAILED, f"Signature failed verification: {weak}")
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
