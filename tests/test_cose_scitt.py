"""COSE_Sign1 statements checked by an independent COSE library (pycose), the
SCITT submitter against the suite's own transparency service, and receipts."""

from __future__ import annotations

import base64
import hashlib
import json

import cbor2
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from pycose.headers import KID, Algorithm, ContentType
from pycose.keys.curves import Ed25519
from pycose.keys.okp import OKPKey
from pycose.messages import Sign1Message
from transparency import TransparencyService

from coordinator.engine.canonical import canonical_bytes
from coordinator.errors import CoseError, ScittUnreachable
from coordinator.security.cose import CHAP_CONTENT_TYPE, decode_sign1, sign1, verify_sign1
from coordinator.security.transparency import ReceiptVerifier, ScittSubmitter, build_statement

RECORD = {"jsonrpc": "2.0", "id": "r1", "method": "task.create",
          "params": {"workspace": "wsp_t", "from": "human:alice", "kind": "k", "input": {"é": 1}}}
ARRIVED = "2023-11-14T22:13:25.000Z"


def _pycose_key(key: Ed25519PrivateKey) -> OKPKey:
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return OKPKey(crv=Ed25519, x=raw)


def _statement(key: Ed25519PrivateKey, record: dict = RECORD) -> dict:
    return build_statement(canonical_bytes(record), issuer="service:coordinator", workspace="wsp_t",
                           arrived=ARRIVED, key=key, kid="coord-1")


def test_statement_decodes_and_verifies_with_pycose() -> None:
    key = Ed25519PrivateKey.generate()
    statement = _statement(key)
    message = Sign1Message.decode(base64.b64decode(statement["cose_sign1"]))
    message.key = _pycose_key(key)
    assert message.verify_signature()
    assert message.phdr[Algorithm].identifier == -8
    assert message.phdr[ContentType] == CHAP_CONTENT_TYPE
    assert message.phdr[KID] == b"coord-1"
    assert json.loads(message.payload) == RECORD and message.payload == canonical_bytes(RECORD)
    assert statement["payload"] == canonical_bytes(RECORD).decode()
    assert base64.b64decode(statement["signature"]) == message.signature


def test_statement_cwt_claims_exact() -> None:
    statement = _statement(Ed25519PrivateKey.generate())
    message = decode_sign1(base64.b64decode(statement["cose_sign1"]))
    assert message.protected[15] == {1: "service:coordinator", 2: "wsp_t", 6: 1_700_000_005}
    assert statement["protected"] == {"alg": -8, "iss": "service:coordinator", "kid": "coord-1",
                                      "cwt_claims": {"sub": "wsp_t", "iat": 1_700_000_005},
                                      "content-type": CHAP_CONTENT_TYPE}


def test_pycose_signed_message_verifies_with_ours_and_tampering_fails() -> None:
    key = Ed25519PrivateKey.generate()
    raw = key.private_bytes_raw()
    message = Sign1Message(phdr={Algorithm: -8, KID: b"k"}, payload=b"hello")
    message.key = OKPKey(crv=Ed25519, d=raw, x=key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    encoded = message.encode()
    assert verify_sign1(encoded, key.public_key()).payload == b"hello"
    with pytest.raises(CoseError):
        verify_sign1(encoded, Ed25519PrivateKey.generate().public_key())
    with pytest.raises(CoseError):
        verify_sign1(encoded, key.public_key(), payload=b"other")
    ours = sign1({}, b"x", key)
    tampered = bytearray(ours)
    tampered[-1] ^= 1
    with pytest.raises(CoseError, match="does not verify"):
        verify_sign1(bytes(tampered), key.public_key())
    for junk in (b"", b"\xff", cbor2.dumps([1, 2]), cbor2.dumps(cbor2.CBORTag(98, [1]))):
        with pytest.raises(CoseError):
            decode_sign1(junk)


def test_placeholder_statement_without_a_key_is_the_reference_shape() -> None:
    statement = build_statement(canonical_bytes(RECORD), issuer="service:coordinator", workspace="wsp_t", arrived=ARRIVED)
    assert statement == {
        "protected": {"alg": -8, "iss": "service:coordinator", "kid": "scitt-issuer",
                      "cwt_claims": {"sub": "wsp_t", "iat": None},
                      "content-type": "application/chap+json;version=0.3"},
        "payload": canonical_bytes(RECORD).decode(),
        "signature": "<deployment-supplied>",
    }


def test_submit_register_and_verify_receipt() -> None:
    key = Ed25519PrivateKey.generate()
    with TransparencyService(trusted=[key.public_key()]) as ts:
        statement = _statement(key)
        receipt = ScittSubmitter(ts.url)(statement)
        assert receipt is not None and receipt["entry_id"] == "1"
        assert ts.entries == [base64.b64decode(statement["cose_sign1"])]
        verify = ReceiptVerifier(ts.key.public_key())
        assert verify(receipt)
        # the receipt is a COSE_Sign1 pycose verifies with the service key over the statement's hash
        message = Sign1Message.decode(base64.b64decode(receipt["receipt"]))
        message.key = _pycose_key(ts.key)
        message.payload = hashlib.sha256(base64.b64decode(statement["cose_sign1"])).digest()
        assert message.verify_signature()
        # tampering with the receipt, or presenting it for another statement, fails
        raw = bytearray(base64.b64decode(receipt["receipt"]))
        raw[-3] ^= 0x40
        assert not verify({**receipt, "receipt": base64.b64encode(bytes(raw)).decode()})
        assert not verify({**receipt, "statement": _statement(key, {**RECORD, "id": "r2"})["cose_sign1"]})
        assert not ReceiptVerifier(Ed25519PrivateKey.generate().public_key())(receipt)
        assert not verify("not an object") and not verify({"receipt": "!!"})


def test_submitter_refused_unreachable_and_failing_service() -> None:
    key = Ed25519PrivateKey.generate()
    with TransparencyService(trusted=[Ed25519PrivateKey.generate().public_key()]) as ts:
        assert ScittSubmitter(ts.url)(_statement(key)) is None  # untrusted issuer: refused
        ts.trusted.append(key.public_key())
        ts.fail_next = True
        with pytest.raises(ScittUnreachable, match="503"):
            ScittSubmitter(ts.url)(_statement(key))
        url = ts.url
    with pytest.raises(ScittUnreachable, match="could not be reached"):
        ScittSubmitter(url, timeout=2)(_statement(key))
    with pytest.raises(ScittUnreachable, match="scitt_issuer_key"):
        ScittSubmitter(url)(build_statement(b"{}", issuer="i", workspace="w", arrived=ARRIVED))
