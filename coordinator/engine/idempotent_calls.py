"""Idempotency keys for unsigned calls (chapline's extension, SPECIFICATION.md,
"Idempotency keys"): a call carrying `x-chapline-idempotency-key` that was
recorded is answered again, not run again, when it is sent again verbatim by
the same sender. What the first call answered is kept in the workspace's
`signed_calls` collection under a slot named by the sender and the key,
written in the same change as the call's entry, so it holds after restarts
and across coordinators sharing the store, as a signed call's replay does."""

from __future__ import annotations

import hashlib
from typing import Any, Final

import msgspec

from coordinator.engine.canonical import canonical_bytes
from coordinator.engine.log import LogReader
from coordinator.engine.wire import INVALID_PARAMS
from coordinator.engine.workspace import Workspace
from coordinator.errors import RpcError
from coordinator.model import SIGNED_CALLS

__all__ = ["IDEMPOTENCY_FIELD", "MAX_KEY_LENGTH", "Earlier", "earlier_answer", "idempotency_slot", "kept_answer"]

# The envelope member (beside `sig`): a top-level member, so that no method's
# params (task.create's own `idempotency_key` among them) can collide with it.
IDEMPOTENCY_FIELD: Final = "x-chapline-idempotency-key"
MAX_KEY_LENGTH: Final = 200
# Slots share `signed_calls` with signed digests ("sha256:..."); the prefix
# keeps the two apart.
_SLOT_PREFIX = "idem:sha256:"


class Earlier:
    """What a recorded call answered: `result`, or the refusal `error`.
    (A plain class, not a Struct: this module is compiled, setup.py.)"""

    __slots__ = ("seq", "result", "error")

    def __init__(self, seq: int, result: Any, error: RpcError | None) -> None:
        self.seq = seq
        self.result = result
        self.error = error


def idempotency_slot(envelope: dict[str, Any], params: dict[str, Any]) -> str | None:
    """The `signed_calls` key of the call's idempotency key (scoped to its
    sender, `params.from`), or None for a call without one. A key that is
    not a string of 1 to MAX_KEY_LENGTH characters is refused (-32602)."""
    if IDEMPOTENCY_FIELD not in envelope:
        return None
    key = envelope[IDEMPOTENCY_FIELD]
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY_LENGTH:
        raise RpcError(
            INVALID_PARAMS,
            f"{IDEMPOTENCY_FIELD} must be a string of 1 to {MAX_KEY_LENGTH} characters; "
            "send a fresh one (a UUID, say) with each new call and the same one when resending it",
            {"field": IDEMPOTENCY_FIELD},
        )
    sender = params.get("from")
    scope = [sender if isinstance(sender, str) else None, key]
    return _SLOT_PREFIX + hashlib.sha256(canonical_bytes(scope)).hexdigest()


def earlier_answer(ws: Workspace, log: LogReader, slot: str, envelope: dict[str, Any]) -> Earlier | None:
    """What the recorded call holding `slot` answered, when `envelope` is that
    call sent again; None when the key is new. The same key on another request
    by the same sender is refused (-32602): it cannot be both calls."""
    kept = ws.get(SIGNED_CALLS, slot)
    if not isinstance(kept, dict):
        return None
    seq = kept.get("seq")
    if type(seq) is not int or not 0 <= seq < ws.count:
        return None
    recorded = log.entries(seq, seq + 1)
    first = recorded[0] if recorded else {}
    call = first["envelope"] if "envelope" in first else first.get("request")
    if call != envelope:
        raise RpcError(
            INVALID_PARAMS,
            f"{IDEMPOTENCY_FIELD} {envelope[IDEMPOTENCY_FIELD]!r} was used by this sender for "
            f"another request (recorded at seq {seq}); a new call needs a new key",
            {"field": IDEMPOTENCY_FIELD, "seq": seq},
        )
    fresh = msgspec.json.decode(msgspec.json.encode(kept))
    error = fresh.get("error")
    if isinstance(error, dict):
        return Earlier(seq, None, RpcError(error["code"], error["message"], error.get("data")))
    return Earlier(seq, fresh.get("result"), None)


def kept_answer(seq: int, result: Any, error: RpcError | None) -> dict[str, Any]:
    """What a slot keeps for the call recorded at `seq`."""
    if error is None:
        return {"seq": seq, "result": msgspec.json.decode(msgspec.json.encode(result))}
    return {"seq": seq, "error": msgspec.json.decode(msgspec.json.encode(error.to_wire()))}
