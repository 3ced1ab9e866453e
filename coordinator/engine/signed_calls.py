"""The signed calls on a workspace's log, by signed digest: a signed request
already refused is answered with that refusal (as 0.3.3 does), and a
verbatim resend of one already accepted, once its signature is checked,
with its original result (beyond 0.3.3: the `signed_calls` collection keeps
`{seq, result}` by digest, written with the call's entry, so it holds after
restarts and across coordinators). SPECIFICATION.md, "Dispatch" (steps 9
and 10) and "Replays"."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

from coordinator.audit import AuditEntry, signed_digest
from coordinator.engine.log import LogReader
from coordinator.engine.workspace import Workspace
from coordinator.errors import CanonicalError, RpcError
from coordinator.model import SIGNED_CALLS
from coordinator.security.signing import signing_bytes

__all__ = [
    "Replay",
    "index_signed",
    "refused_before",
    "replay_of",
    "signed_index",
    "signed_message",
]


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


def refused_before(ws: Workspace, log: LogReader, digest: str) -> RpcError | None:
    """As in 0.3.3 (SPECIFICATION.md, "Replays"): a signed call whose digest is
    a recorded refusal gets that refusal again, without being evaluated
    (whatever its `sig`, as there)."""
    seen = signed_index(ws, log).get(digest)
    if seen is None:
        return None
    seq, code = seen
    if code is None:  # accepted: see replay_of
        return None
    return RpcError(code, f"This signed request was refused at seq {seq}", {"refused_at_seq": seq})


def replay_of(ws: Workspace, log: LogReader, digest: str, sig: str) -> Replay | None:
    """The original result of an accepted signed call sent again verbatim, or
    None (0.3.3 runs it again). The digest leaves `sig` out, so a resend with
    another `sig` shares it: only the very `sig` the log recorded for the call
    makes the resend the call itself (the pipeline has checked it first, when
    signatures are required)."""
    kept = ws.get(SIGNED_CALLS, digest)
    if not isinstance(kept, dict) or "result" not in kept:
        return None
    seq = kept.get("seq")
    if type(seq) is not int or not 0 <= seq < ws.count:
        return None
    recorded = log.entries(seq, seq + 1)
    call = recorded[0].get("envelope") if recorded else None
    if not isinstance(call, dict) or call.get("sig") != sig:
        return None
    return Replay(seq, msgspec.json.decode(msgspec.json.encode(kept["result"])))


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
