"""Audit entries: their wire shape and the hash chain. (Which refusals are
recorded is the registry's: `engine.registry.refusal_is_recorded`.)"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

import msgspec

from coordinator.engine.canonical import ZERO_HASH, canonical_bytes, link_hash
from coordinator.errors import CanonicalError

__all__ = [
    "AuditEntry",
    "ChainVerifier",
    "entry_is_well_formed",
    "record_of",
    "signed_digest",
]


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
        wire: dict[str, Any] = msgspec.to_builtins(self)
        return wire


def record_of(entry: dict[str, Any]) -> Any:
    """What an entry's link hashes: the envelope, or `{outcome, request}`."""
    if "envelope" in entry:
        return entry["envelope"]
    return {"outcome": entry.get("outcome"), "request": entry.get("request")}


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


class _Call(msgspec.Struct):
    """The two fields that make a recorded call well formed (as `_is_call`)."""

    jsonrpc: Literal["2.0"]
    method: str


class _Outcome(msgspec.Struct):
    """A refusal's outcome (as `entry_is_well_formed`)."""

    status: Literal["refused"]
    code: int


class _StoredEntry(msgspec.Struct):
    """A stored entry with its record's parts left as the bytes stored."""

    seq: int
    prev_hash: str | None = None
    envelope: msgspec.Raw = msgspec.Raw()
    request: msgspec.Raw = msgspec.Raw()
    outcome: msgspec.Raw = msgspec.Raw()


_decode_stored = msgspec.json.Decoder(_StoredEntry).decode
_decode_call = msgspec.json.Decoder(_Call).decode
_decode_outcome = msgspec.json.Decoder(_Outcome).decode
_decode_any = msgspec.json.Decoder().decode


class ChainVerifier:
    """Replays the links of one workspace's log, fed in seq order.

    Chaining starts at the first entry that carries `prev_hash` (its
    prev_hash must be the zero hash); every later entry must carry the link of
    the one before. Stored text is hashed as stored when it is canonical (as
    chapline writes it): only where that link does not match is the entry
    decoded and canonicalised, so logs written with other spacing verify too.
    """

    def __init__(self) -> None:
        self.checked_from_seq: int | None = None
        self.entries_checked = 0
        self.breaks: list[str] = []
        self._head: str | None = None
        # The previous entry, kept to recompute its link canonically when the
        # link from its stored bytes does not match.
        self._last: dict[str, Any] | bytes | None = None
        self._last_prev = ""
        self._after_malformed = False

    def add_text(self, text: bytes) -> None:
        """One stored entry, as the JSON text the store holds."""
        try:
            e = _decode_stored(text)
            if len(e.envelope):
                if len(e.request) or len(e.outcome):
                    raise ValueError("both an envelope and a request")
                _decode_call(e.envelope)
                record = bytes(e.envelope)
            else:
                _decode_call(e.request)
                _decode_outcome(e.outcome)
                record = b'{"outcome":' + bytes(e.outcome) + b',"request":' + bytes(e.request) + b"}"
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError):
            try:
                entry = _decode_any(text)
            except msgspec.DecodeError:
                entry = {}
            self.add_entry(entry if isinstance(entry, dict) else {})
            return
        prev = e.prev_hash
        if prev is not None and prev == self._head and not self._after_malformed:
            # The common case, inline: a chained entry that links to the head.
            self.entries_checked += 1
            self._head = "sha256:" + hashlib.sha256(record + prev.encode()).hexdigest()
            self._last, self._last_prev = text, prev
        elif self._start(e.seq, prev):
            self._link(e.seq, prev, True, text, record)

    def add_entry(self, entry: dict[str, Any]) -> None:
        """One entry in wire shape."""
        seq, prev = entry.get("seq"), entry.get("prev_hash")
        if not self._start(seq, prev):
            return
        well_formed = entry_is_well_formed(entry)
        try:
            record = canonical_bytes(record_of(entry))
        except CanonicalError:
            self.breaks.append(f"seq {seq}: record cannot be canonicalised")
            record = b""
        self._link(seq, prev, well_formed, entry, record)

    def head(self) -> str | None:
        """The recomputed head (canonically, for the last entry)."""
        if isinstance(self._last, bytes):
            self._relink_last()
        return self._head

    def _start(self, seq: Any, prev: Any) -> bool:
        if self.checked_from_seq is None:
            if prev is None:
                return False
            self.checked_from_seq = seq
            self._head = ZERO_HASH
        self.entries_checked += 1
        return True

    def _link(self, seq: Any, prev: Any, well_formed: bool, source: Any, record: bytes) -> None:
        if not well_formed:
            self.breaks.append(f"seq {seq}: malformed entry")
            self._after_malformed = True
        else:
            if prev != self._head and isinstance(self._last, bytes):
                self._relink_last()
            if prev != self._head and not self._after_malformed:
                self.breaks.append(f"seq {seq}: prev_hash mismatch")
            self._after_malformed = False
        # After a malformed entry the next one is judged against its own prev_hash.
        base = prev if isinstance(prev, str) else (self._head or "")
        self._head = link_hash(record, base)
        self._last, self._last_prev = source, base

    def _relink_last(self) -> None:
        """The previous link did not match as stored: recompute it canonically."""
        last = self._last
        assert isinstance(last, bytes)  # callers relink only stored text
        entry = _decode_any(last)
        self._last = entry
        try:
            self._head = link_hash(canonical_bytes(record_of(entry)), self._last_prev)
        except CanonicalError:
            self.breaks.append(f"seq {entry.get('seq')}: record cannot be canonicalised")
