"""The signed calls on a workspace's log, by signed digest (dispatch step 9:
a signed request already refused is answered with that refusal)."""

from __future__ import annotations

from typing import Any

from coordinator.audit import AuditEntry, signed_digest
from coordinator.canonical import CanonicalError
from coordinator.log import LogReader
from coordinator.workspace import Workspace

__all__ = ["index_signed", "signed_index"]


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
