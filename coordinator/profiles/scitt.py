"""audit-scitt/1.0: statements about the log for a transparency service, and receipts.

`audit.verify_chain` (also owned by audit-scitt) is core's: it answers
whatever a workspace advertises.

- `audit.submit_to_scitt {workspace, range?: {from_seq?, to_seq?}, issuer?}`:
  one statement per entry in `from_seq <= seq < to_seq` (default: all).
  Without a `scitt_submitter`: `{statements, note}`; with one, each statement
  is handed to it in seq order and the answer is `{receipts: [{seq,
  receipt}]}`; the submitter raising is -32080, returning None -32081. Never
  recorded (0.3.3 counts it among the reads).
- `audit.verify_receipt {workspace, receipt}`: `{verified: true}` when the
  `verify_scitt_receipt` hook accepts the receipt object; -32082 when it
  refuses, raises, or no hook is configured (fails closed).

Statements are real COSE_Sign1 when the coordinator has a `scitt_issuer_key`
(coordinator.security.transparency.build_statement), else 0.3.3's JSON model.
"""

from __future__ import annotations

from typing import Any

from coordinator.audit import record_of
from coordinator.engine.call import Call
from coordinator.engine.canonical import canonical_bytes
from coordinator.engine.registry import FROM, INTEGER, STRING, Profile, schema
from coordinator.engine.wire import (
    SCITT_RECEIPT_INVALID,
    SCITT_STATEMENT_REJECTED,
    SCITT_UNREACHABLE,
    invalid_params,
)
from coordinator.errors import RpcError

__all__ = ["PROFILE"]

# Statements are COSE in CBOR (coordinator/security/transparency.py, imported
# by the handler that makes them).
PROFILE = Profile("audit-scitt/1.0", extra="crypto")
DEFAULT_ISSUER = "service:coordinator"
_NOTE = "No scitt_submitter configured; submit these out-of-band"


def _bound(value: Any, name: str, default: int) -> int:
    if value is None:
        return default
    if type(value) is not int or value < 0:
        raise invalid_params(f"range.{name} must be a non-negative integer seq")
    return value


@PROFILE.method(
    "audit.submit_to_scitt",
    read=True,
    params=schema(
        ["workspace"],
        from_=FROM,
        range={"type": "object", "properties": {"from_seq": INTEGER, "to_seq": INTEGER}},
        issuer=STRING,
    ),
    title="Submit the log to a transparency service",
    description="Make one signed statement per audit entry in the range (to_seq exclusive) "
    "and hand each to the configured SCITT submitter; without one, return the statements.",
    annotations={"openWorldHint": True, "idempotentHint": False},
)
def audit_submit_to_scitt(call: Call) -> dict[str, Any]:
    from coordinator.security.transparency import build_statement

    ws = call.workspace()
    span = call.params.get("range")
    if span is None:
        span = {}
    elif not isinstance(span, dict):
        raise invalid_params("range must be an object {from_seq, to_seq} (to_seq exclusive)")
    start = _bound(span.get("from_seq"), "from_seq", 0)
    stop = min(_bound(span.get("to_seq"), "to_seq", ws.count), ws.count)
    issuer = call.params.get("issuer", DEFAULT_ISSUER)
    if not isinstance(issuer, str):
        raise invalid_params("issuer must be a string (a participant or service URI)")
    options = call.options
    entries = call.log.entries(start, stop) if start < stop else []
    statements = [
        (
            entry["seq"],
            build_statement(
                canonical_bytes(record_of(entry)),
                issuer=issuer,
                workspace=ws.id,
                arrived=entry["arrived"],
                key=options.scitt_issuer_key,
                kid=options.scitt_issuer_kid,
            ),
        )
        for entry in entries
    ]
    submitter = options.scitt_submitter
    if submitter is None:
        return {"statements": [s for _, s in statements], "note": _NOTE}
    receipts = []
    for seq, statement in statements:
        try:
            receipt = submitter(statement)
        except Exception as exc:
            raise RpcError(SCITT_UNREACHABLE, f"SCITT submission error: {exc}") from None
        if receipt is None:
            raise RpcError(SCITT_STATEMENT_REJECTED, f"Statement rejected at seq {seq}")
        receipts.append({"seq": seq, "receipt": receipt})
    return {"receipts": receipts}


@PROFILE.method(
    "audit.verify_receipt",
    read=True,
    params=schema(
        ["workspace", "receipt"], from_=FROM, receipt={"type": "object", "additionalProperties": True}
    ),
    annotations={"openWorldHint": True},
    title="Verify a transparency receipt",
    description="Check a receipt from a SCITT transparency service with the configured verifier.",
)
def audit_verify_receipt(call: Call) -> dict[str, Any]:
    receipt = call.params.get("receipt")
    if not isinstance(receipt, dict):
        raise invalid_params("receipt must be an object")
    verifier = call.options.verify_scitt_receipt
    if verifier is None:
        raise RpcError(
            SCITT_RECEIPT_INVALID,
            "No verify_scitt_receipt hook configured; receipt not verified "
            "(pass Coordinator(verify_scitt_receipt=ReceiptVerifier(service_key)))",
        )
    try:
        verified = bool(verifier(receipt))
    except Exception:
        verified = False
    if not verified:
        raise RpcError(SCITT_RECEIPT_INVALID, "Receipt did not verify")
    return {"verified": True}

