"""security-signed/1.0: every call but `workspace.create` and `participant.join`
is signed by its sender, when the coordinator requires signatures.

The check (dispatch step 10, after a signed call already on the log is
answered again and before step-up and the profile gate), first failure wins, as 0.3.3 orders it:

- `sig` is not a string → -32070;
- `params.from` or `params.workspace` is not a string, `params.ts` is present
  and not a string, or the workspace does not exist → -32070;
- the tag is not `ed25519:<kid>:<base64 of 64 bytes>` → -32070;
- `from` is not a member → -32071;
- the kid names no key of the member → -32071; a revoked key → -32072; a key
  rotated out before the call arrived → -32071 (whatever `ts` says);
- the key or R is a small-order point or not canonically encoded, or S is
  not below L (strict verification, as libsodium's) → -32070;
- the signature does not verify over the JCS form without `sig` → -32070;
- `participant.rotate_key` signed with another key than `old_kid` → -32073.

Keys are judged by the coordinator's clock when the call arrives, never by
the sender's `ts` (SPECIFICATION.md, "Key lifecycle"). A refusal here is never
recorded.
"""

from __future__ import annotations

from typing import Any

from coordinator.engine.call import Call
from coordinator.engine.registry import Method, Profile
from coordinator.engine.wire import SIG_KEY_NOT_FOUND, SIG_ROTATION_KEY_MISMATCH, SIG_VERIFY_FAILED
from coordinator.errors import RpcError, SignatureError
from coordinator.security.signing import (
    key_for_call,
    parse_sig,
    public_key_from_jwk,
    verify_envelope,
)

__all__ = ["PROFILE", "UNSIGNED_METHODS", "check_signature", "signed_by_sender"]

# The profile owns no method: participant.rotate_key and participant.revoke_key
# are core's; what it adds is this check and the key lifecycle they keep. The
# check verifies Ed25519 signatures (cryptography).
PROFILE = Profile("security-signed/1.0", extra="crypto")

# Methods that are never signature-checked: a key cannot sign before it is
# registered; and the coordinator's own sweep (`Coordinator.sweep`), which has
# no key and does only what the clock has already decided.
UNSIGNED_METHODS = frozenset({"workspace.create", "participant.join", "x-chapline.work.sweep"})


@PROFILE.verify_sender(enabled_by="require_signatures")
def signed_by_sender(call: Call, method: Method) -> None:
    """Dispatch step 10, when the coordinator requires signatures: refuse the
    call unless its sender's current key signed it (`check_signature`)."""
    if method.name not in UNSIGNED_METHODS:
        members = call.member if call.ws else None
        check_signature(call.envelope, members, call.arrived, call.signed_bytes)


def check_signature(
    envelope: dict[str, Any], members: Any, arrived: str, message: bytes | None = None
) -> None:
    """Refuse `envelope` unless its sender's current key signed it.

    `members` is the workspace's member lookup (`uri -> Member | None`), or
    None when the workspace does not exist; `message` is the envelope's
    `signing_bytes`, when the caller has them already.
    """
    if not isinstance(envelope.get("sig"), str):
        raise RpcError(
            SIG_VERIFY_FAILED,
            "Missing top-level `sig` field: this coordinator requires every call to be "
            "signed (coordinator.sign_envelope)",
        )
    params = envelope.get("params") or {}
    sender = params.get("from")
    if not isinstance(sender, str) or not isinstance(params.get("workspace"), str):
        raise RpcError(SIG_VERIFY_FAILED, "Cannot verify signature: missing from/workspace")
    if "ts" in params and not isinstance(params["ts"], str):
        raise RpcError(SIG_VERIFY_FAILED, "Cannot verify signature: ts must be a string")
    if members is None:
        raise RpcError(SIG_VERIFY_FAILED, "Cannot verify signature: unknown workspace")
    try:
        kid, _ = parse_sig(envelope["sig"])
        member = members(sender)
        if member is None:
            raise SignatureError(SIG_KEY_NOT_FOUND, f"No member: {sender}")
        record = key_for_call(member.keys, kid, arrived, sender)
        verify_envelope(envelope, public_key_from_jwk(record.get("jwk")), message)
    except SignatureError as exc:
        raise RpcError(exc.code, exc.message) from None
    if envelope.get("method") == "participant.rotate_key" and kid != params.get("old_kid"):
        raise RpcError(SIG_ROTATION_KEY_MISMATCH, "Rotation must be signed with the old key")
