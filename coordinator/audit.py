"""Audit entries: their wire shape, what is recorded, and the hash chain."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable

import msgspec

from coordinator.canonical import ZERO_HASH, CanonicalError, canonical_bytes, link_hash

__all__ = [
    "AuditEntry",
    "ChainReport",
    "READS",
    "PRIVILEGED_METHODS",
    "entry_is_well_formed",
    "record_of",
    "refusal_is_recorded",
    "signed_digest",
    "verify_entries",
]

# Never recorded, accepted or refused.
READS = frozenset(
    {
        "workspace.describe",
        "audit.read",
        "audit.verify_chain",
        "audit.verify_receipt",
        "audit.submit_to_scitt",
    }
)
PRIVILEGED_METHODS = frozenset(
    {
        "control.pause",
        "control.resume",
        "control.cancel",
        "control.snapshot",
        "control.rollback",
        "control.supersede",
        "control.set_mode_ceiling",
        "workspace.set_profiles",
        "participant.rotate_key",
        "participant.revoke_key",
    }
)
# Refusals with these codes say nothing about the workspace and are never kept.
_NEVER_RECORDED_CODES = frozenset({-32700, -32600, -32602, -32603, -32070, -32071, -32072, -32073})
_NEVER_RECORDED_METHODS = READS | {"workspace.create", "participant.join"}

class AuditEntry(msgspec.Struct, frozen=True, omit_defaults=True):
    """One log entry: an accepted call (`envelope`) or a recorded refusal
    (`request` + `outcome`). `prev_hash` is present on chained entries."""

    seq: int
    arrived: str
    envelope: Any = None
    prev_hash: str | None = None
    request: Any = None
    outcome: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The wire shape `audit.read` returns, with no null keys."""
        return msgspec.to_builtins(self)


def record_of(entry: dict[str, Any]) -> Any:
    """What an entry's link hashes: the envelope, or `{outcome, request}`."""
    if "envelope" in entry:
        return entry["envelope"]
    return {"outcome": entry.get("outcome"), "request": entry.get("request")}


def refusal_is_recorded(method: str, code: int, gated: bool) -> bool:
    """Whether a refused call by a current member is appended to the log."""
    if method in _NEVER_RECORDED_METHODS or code in _NEVER_RECORDED_CODES:
        return False
    if code == -32601:
        return gated and method in PRIVILEGED_METHODS
    return True


def signed_digest(envelope: dict[str, Any]) -> str:
    """The digest a signature covers: JCS of the envelope without `sig`."""
    unsigned = {k: v for k, v in envelope.items() if k != "sig"}
    return "sha256:" + hashlib.sha256(canonical_bytes(unsigned)).hexdigest()


def _is_call(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("jsonrpc") == "2.0"
        and isinstance(value.get("method"), str)
    )


def entry_is_well_formed(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    if "envelope" in entry:
        return _is_call(entry["envelope"]) and "outcome" not in entry and "request" not in entry
    outcome = entry.get("outcome")
    return (
        _is_call(entry.get("request"))
        and isinstance(outcome, dict)
        and outcome.get("status") == "refused"
        and type(outcome.get("code")) is int
    )


class ChainReport(msgspec.Struct):
    """The outcome of replaying a log's links."""

    checked_from_seq: int | None = None
    entries_checked: int = 0
    head: str | None = None
    breaks: list[str] = []
    # After a malformed entry the next one is judged against its own prev_hash.
    after_malformed: bool = False


def verify_entries(entries: Iterable[dict[str, Any]], report: ChainReport) -> None:
    """Replay links over `entries` (in seq order), continuing `report`.

    Chaining starts at the first entry that carries `prev_hash`; every later
    entry must carry the link of the one before. Call repeatedly with
    consecutive chunks of a log.
    """
    head = report.head
    after_malformed = report.after_malformed
    for entry in entries:
        seq = entry.get("seq")
        prev = entry.get("prev_hash")
        if report.checked_from_seq is None:
            if prev is None:
                continue
            report.checked_from_seq = seq
            head = ZERO_HASH
        report.entries_checked += 1
        if not entry_is_well_formed(entry):
            report.breaks.append(f"seq {seq}: malformed entry")
            after_malformed = True
            head = prev if isinstance(prev, str) else head
        elif prev != head and not after_malformed:
            report.breaks.append(f"seq {seq}: prev_hash mismatch")
        else:
            after_malformed = False
        try:
            record = canonical_bytes(record_of(entry))
        except CanonicalError:
            report.breaks.append(f"seq {seq}: record cannot be canonicalised")
            record = b""
        head = link_hash(record, prev if isinstance(prev, str) else head)
    report.head = head
    report.after_malformed = after_malformed
