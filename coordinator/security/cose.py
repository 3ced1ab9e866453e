"""COSE_Sign1 (RFC 9052) with Ed25519, in CBOR: the signed statements of audit-scitt
(chapline[crypto]).

A CHAP statement is a tagged COSE_Sign1 whose payload is the JCS bytes of one
audit entry's record (the envelope of an accepted call, `{outcome, request}`
for a recorded refusal) and whose protected header says who issued it about
which workspace:

    18([
      << {1: -8,                                     / alg: EdDSA /
          3: "application/chap+json;version=0.3",    / content type /
          4: h'<kid>',                               / the issuer key's kid /
          15: {1: <issuer>, 2: <workspace>, 6: <iat>}  / CWT claims (RFC 9597) /
         } >>,
      {},                                            / unprotected /
      << JCS(record) >>,                             / payload /
      <64-byte Ed25519 signature over Sig_structure>
    ])

Sig_structure = ["Signature1", protected bytes, h'', payload] (RFC 9052 §4.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.errors import CoseError
from coordinator.extras import needs

with needs("crypto"):
    import cbor2
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "ALG",
    "ALG_EDDSA",
    "CHAP_CONTENT_TYPE",
    "CONTENT_TYPE",
    "CWT_CLAIMS",
    "CWT_IAT",
    "CWT_ISS",
    "CWT_SUB",
    "KID",
    "Sign1",
    "decode_sign1",
    "sign1",
    "verify_sign1",
]

# Header labels (RFC 9052 §3.1, RFC 9597) and values.
ALG = 1
CONTENT_TYPE = 3
KID = 4
CWT_CLAIMS = 15
CWT_ISS = 1
CWT_SUB = 2
CWT_IAT = 6
ALG_EDDSA = -8
CHAP_CONTENT_TYPE = "application/chap+json;version=0.3"
_SIGN1_TAG = 18


class Sign1:
    """A decoded COSE_Sign1: headers, payload (None when detached), signature,
    and the protected header's exact bytes (what the signature covers)."""

    __slots__ = ("protected", "protected_bytes", "unprotected", "payload", "signature")

    def __init__(
        self,
        protected: dict[Any, Any],
        protected_bytes: bytes,
        unprotected: dict[Any, Any],
        payload: bytes | None,
        signature: bytes,
    ) -> None:
        self.protected = protected
        self.protected_bytes = protected_bytes
        self.unprotected = unprotected
        self.payload = payload
        self.signature = signature


def _to_be_signed(protected_bytes: bytes, payload: bytes) -> bytes:
    return cbor2.dumps(["Signature1", protected_bytes, b"", payload])


def sign1(
    protected: dict[Any, Any],
    payload: bytes,
    key: Ed25519PrivateKey,
    *,
    unprotected: dict[Any, Any] | None = None,
    detached: bool = False,
) -> bytes:
    """A tagged COSE_Sign1 over `payload`, signed with `key` (alg EdDSA is set).

    `detached=True` leaves the payload out of the message (nil), as receipts
    over a statement's hash do; the verifier supplies it again."""
    header = {ALG: ALG_EDDSA, **protected}
    protected_bytes = cbor2.dumps(header, canonical=True)
    signature = key.sign(_to_be_signed(protected_bytes, payload))
    body = [protected_bytes, unprotected or {}, None if detached else payload, signature]
    return cbor2.dumps(cbor2.CBORTag(_SIGN1_TAG, body))


def decode_sign1(data: bytes) -> Sign1:
    """Decode a (tagged or untagged) COSE_Sign1; CoseError if it is not one."""
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise CoseError(f"not CBOR: {exc}") from None
    if isinstance(value, cbor2.CBORTag):
        if value.tag != _SIGN1_TAG:
            raise CoseError(f"CBOR tag {value.tag} is not COSE_Sign1 (18)")
        value = value.value
    if not (isinstance(value, (list, tuple)) and len(value) == 4):
        raise CoseError("a COSE_Sign1 is an array of 4 items")
    protected_bytes, unprotected, payload, signature = value
    # Inside a tag cbor2 decodes immutably (tuples, frozendicts): test for Mapping.
    if not isinstance(protected_bytes, bytes) or not isinstance(unprotected, Mapping):
        raise CoseError("COSE_Sign1 headers must be a bstr and a map")
    if not (payload is None or isinstance(payload, bytes)) or not isinstance(signature, bytes):
        raise CoseError("COSE_Sign1 payload must be a bstr or nil, and its signature a bstr")
    try:
        protected = cbor2.loads(protected_bytes) if protected_bytes else {}
    except (cbor2.CBORDecodeError, ValueError, TypeError, EOFError) as exc:
        raise CoseError(f"protected header is not CBOR: {exc}") from None
    if not isinstance(protected, Mapping):
        raise CoseError("protected header must be a map")
    return Sign1(dict(protected), protected_bytes, dict(unprotected), payload, signature)


def verify_sign1(
    data: bytes | Sign1, key: Ed25519PublicKey, *, payload: bytes | None = None
) -> Sign1:
    """Decode and check a COSE_Sign1 signed with EdDSA by `key`. Pass `payload`
    for a detached one (or to insist on the payload an attached one carries)."""
    message = data if isinstance(data, Sign1) else decode_sign1(data)
    if message.protected.get(ALG) != ALG_EDDSA:
        raise CoseError(f"alg {message.protected.get(ALG)!r} is not EdDSA (-8)")
    content = message.payload if payload is None else payload
    if content is None:
        raise CoseError("the payload is detached: pass it to verify")
    if message.payload is not None and payload is not None and message.payload != payload:
        raise CoseError("the payload differs from the one expected")
    try:
        key.verify(message.signature, _to_be_signed(message.protected_bytes, content))
    except InvalidSignature:
        raise CoseError("COSE_Sign1 signature does not verify with the given key") from None
    return message
