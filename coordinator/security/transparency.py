"""audit-scitt/1.0 beyond the hooks: real statements, a submitter, a receipt verifier
(chapline[crypto]).

- `build_statement` makes the statement `audit.submit_to_scitt` returns for
  one entry. With an issuer key it is a real COSE_Sign1 (see coordinator.security.cose)
  and the JSON view carries its signature and the whole message
  (`cose_sign1`, base64); without one it is the JSON model 0.3.3 returns, with
  the placeholder signature `"<deployment-supplied>"`.
- `ScittSubmitter(url)` is a `scitt_submitter` hook: it registers a statement
  with a transparency service (`POST <url>/entries`, body the COSE_Sign1,
  `Content-Type: application/cose`) and returns the receipt object, None when
  the service refuses the statement (-32081), and raises ScittUnreachable
  when it cannot be reached or fails (-32080).
- `ReceiptVerifier(service_key)` is a `verify_scitt_receipt` hook: a receipt
  object `{entry_id, receipt, statement}` (base64 CBOR) verifies when
  `receipt` is a COSE_Sign1 by the service's key over the SHA-256 of
  `statement` (detached payload).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import urllib.error
import urllib.request
from typing import Any

from coordinator.engine.clock import epoch_seconds
from coordinator.errors import CoseError, ScittUnreachable, SignatureError
from coordinator.extras import needs
from coordinator.security.cose import (
    ALG_EDDSA,
    CHAP_CONTENT_TYPE,
    CONTENT_TYPE,
    CWT_CLAIMS,
    CWT_IAT,
    CWT_ISS,
    CWT_SUB,
    KID,
    decode_sign1,
    sign1,
    verify_sign1,
)
from coordinator.security.signing import public_key_from_jwk

with needs("crypto"):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = ["PLACEHOLDER_SIGNATURE", "ReceiptVerifier", "ScittSubmitter", "build_statement"]

PLACEHOLDER_SIGNATURE = "<deployment-supplied>"
_PLACEHOLDER_KID = "scitt-issuer"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def build_statement(
    record: bytes,
    *,
    issuer: str,
    workspace: str,
    arrived: str,
    key: Ed25519PrivateKey | None = None,
    kid: str = _PLACEHOLDER_KID,
) -> dict[str, Any]:
    """The statement about one entry whose record has JCS bytes `record`."""
    if key is None:
        return {
            "protected": {
                "alg": ALG_EDDSA,
                "iss": issuer,
                "kid": _PLACEHOLDER_KID,
                "cwt_claims": {"sub": workspace, "iat": None},
                "content-type": CHAP_CONTENT_TYPE,
            },
            "payload": record.decode("utf-8"),
            "signature": PLACEHOLDER_SIGNATURE,
        }
    iat = epoch_seconds(arrived)
    protected = {
        CONTENT_TYPE: CHAP_CONTENT_TYPE,
        KID: kid.encode("utf-8"),
        CWT_CLAIMS: {CWT_ISS: issuer, CWT_SUB: workspace, CWT_IAT: iat},
    }
    message = sign1(protected, record, key)
    return {
        "protected": {
            "alg": ALG_EDDSA,
            "iss": issuer,
            "kid": kid,
            "cwt_claims": {"sub": workspace, "iat": iat},
            "content-type": CHAP_CONTENT_TYPE,
        },
        "payload": record.decode("utf-8"),
        "signature": _b64(decode_sign1(message).signature),
        "cose_sign1": _b64(message),
    }


class ScittSubmitter:
    """Register statements with a SCITT transparency service over HTTP."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/") + "/entries"
        self.timeout = timeout

    def __call__(self, statement: dict[str, Any]) -> dict[str, Any] | None:
        cose = statement.get("cose_sign1") if isinstance(statement, dict) else None
        if not isinstance(cose, str):
            raise ScittUnreachable(
                "the statement is not signed COSE (no cose_sign1): give the Coordinator "
                "a scitt_issuer_key so that it signs its statements"
            )
        body = base64.b64decode(cose)
        request = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/cose"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                receipt = response.read()
                entry_id = response.headers.get("Location", "").rsplit("/", 1)[-1]
        except urllib.error.HTTPError as exc:
            if 400 <= exc.code < 500:
                return None  # the service refused this statement
            raise ScittUnreachable(f"{self.url} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ScittUnreachable(f"{self.url} could not be reached: {exc}") from None
        return {"entry_id": entry_id, "receipt": _b64(receipt), "statement": cose}


class ReceiptVerifier:
    """Check receipts signed by one transparency service's Ed25519 key (a
    public key, or its JWK)."""

    def __init__(self, service_key: Ed25519PublicKey | dict[str, Any]) -> None:
        if isinstance(service_key, dict):
            try:
                service_key = public_key_from_jwk(service_key)
            except SignatureError as exc:
                raise ValueError(f"service_key: {exc.message}") from None
        self._key = service_key

    def __call__(self, receipt: Any) -> bool:
        if not isinstance(receipt, dict):
            return False
        try:
            receipt_bytes = base64.b64decode(receipt.get("receipt", ""), validate=True)
            statement = base64.b64decode(receipt.get("statement", ""), validate=True)
            verify_sign1(receipt_bytes, self._key, payload=hashlib.sha256(statement).digest())
        except (CoseError, binascii.Error, TypeError, ValueError):
            return False
        return bool(statement)
