"""The signed calls on a workspace's log, by signed digest (dispatch step 9):
a signed request already refused is answered with that refusal (0.3.3's B1),
and one already accepted with its original result (beyond 0.3.3: the
`signed_calls` collection keeps `{seq, result}` by digest, written with the
call's entry, so it holds after restarts and across coordinators)."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from coordinator.audit import AuditEntry, signed_digest
from coordinator.canonical import CanonicalError
from coordinator.log import LogReader
from coordinator.signing import signing_bytes
from coordinator.wire import RpcError
from coordinator.workspace import Workspace
from storage import SIGNED_CALLS

__all__ = ["Replay", "index_signed", "seen_before", "signed_index", "signed_message"]


class Replay:
    """An accepted signed call sent again: answer `result` (a fresh copy).
    (A plain class, not a Struct: this module is compiled, setup.py.)"""

    __slots__ = ("seq", "result")

    def __init__(self, seq: int, result: Any) -> None:
        self.seq = seq
        self.result = result


def signed_message(envelope: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """What a string `sig` covers and its signed digest, each computed once;
    (None, None) for a call without one."""
    if not isinstance(envelope.get("sig"), str):
        return None, None
    message = signing_bytes(envelope)
    return message, "sha256:" + hashlib.sha256(message).hexdigest()


def seen_before(ws: Workspace, log: LogReader, digest: str) -> Replay | RpcError | None:
    """A signed call already on the log is not evaluated again: a refused one
    gets its refusal, an accepted one its original result (0.3.3 runs it again)."""
    kept = ws.get(SIGNED_CALLS, digest)
    if isinstance(kept, dict) and "result" in kept:
        return Replay(kept.get("seq", -1), msgspec.json.decode(msgspec.json.encode(kept["result"])))
    seen = signed_index(ws, log).get(digest)
    if seen is None:
        return None
    seq, code = seen
    if code is None:  # on the log as accepted, before its result was kept: run it
        return None
    return RpcError(code, f"This signed request was refused at seq {seq}", {"refused_at_seq": seq})


def signed_index(ws: Workspace, log: LogReader) -> dict[str, tuple[int, int | None]]:
    """digest -> (seq, refusal code or None) of every signed call on the log,
    built from the log on first need and kept on the workspace."""
    index = ws.refusal_digests
    if index is None:
        index = {}
        for entry in log.entries(0, ws.count):
            call = entry["envelope"] if "envelope" in entry else entry.get("request")
            if isinstance(call, dict) and isinstance(call.get("sig"), str):
                try:
                    digest = signed_digest(call)
                except CanonicalError:
                    continue
                outcome = entry.get("outcome")
                code = outcome.get("code") if isinstance(outcome, dict) else None
                index.setdefault(digest, (entry["seq"], code))
        ws.refusal_digests = index
    return index


def index_signed(ws: Workspace, envelope: dict[str, Any], entry: AuditEntry) -> None:
    """Add a just-recorded signed call to an index already built."""
    if ws.refusal_digests is not None and isinstance(envelope.get("sig"), str):
        code = entry.outcome["code"] if entry.outcome is not None else None
        ws.refusal_digests.setdefault(signed_digest(envelope), (entry.seq, code))
