"""Checking a store end to end: rows, entries, chains, heads and objects.

`verify_store` reads every workspace of a store (or one) the way a later
reader would, and reports what does not hold, workspace by workspace, with
the first seq where it breaks. It never raises for damaged data: a row that
cannot be read is a finding like any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from coordinator.audit import ChainVerifier, entry_is_well_formed
from coordinator.canonical import ZERO_HASH
from coordinator.model import from_text
from coordinator.replay import replay_workspace
from storage import IDEMPOTENCY_KEYS, Store

__all__ = ["Finding", "WorkspaceReport", "verify_store", "verify_workspace"]

_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class Finding:
    """One thing that does not hold. `seq` is the entry it is at, if any;
    `where` names the part: "meta", "entry", "chain", "head" or
    "collection/key" for an object."""

    seq: int | None
    where: str
    detail: str

    def describe(self) -> str:
        at = f"seq {self.seq}" if self.seq is not None else self.where
        return f"{at}: {self.detail}"


@dataclass
class WorkspaceReport:
    """What `verify_workspace` found in one workspace."""

    workspace: str
    entries: int = 0
    head: str | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def first(self) -> Finding | None:
        """The finding to report first: the lowest seq, else the first found."""
        at_seq = [f for f in self.findings if f.seq is not None]
        if at_seq:
            return min(at_seq, key=lambda f: f.seq or 0)
        return self.findings[0] if self.findings else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "ok": self.ok,
            "entries": self.entries,
            "head": self.head,
            "findings": [
                {"seq": f.seq, "where": f.where, "detail": f.detail} for f in self.findings
            ],
        }


class _Captured(logging.Handler):
    """What the store says while loading, where it skips a damaged workspace."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _load_meta(store: Store, workspace: str, report: WorkspaceReport) -> dict[str, Any] | None:
    captured = _Captured()
    logger = logging.getLogger("storage")
    logger.addHandler(captured)
    try:
        held = store.load_held(workspace)
    finally:
        logger.removeHandler(captured)
    for message in captured.messages:
        report.findings.append(Finding(None, "meta", f"the store reports: {message}"))
    if not held:
        if not captured.messages:
            report.findings.append(Finding(None, "meta", "the store cannot load this workspace"))
        return None
    report.entries = held[0].version
    return {"id": workspace, **held[0].meta, "_objects": held[0].objects}


def _entries(store: Store, workspace: str, report: WorkspaceReport) -> list[dict[str, Any]] | None:
    """The decoded log, or None (with findings) when a row is unreadable."""
    entries: list[dict[str, Any]] = []
    broken = False
    for position, text in enumerate(store.read_entry_texts(workspace)):
        try:
            entry = _decode(text)
        except msgspec.DecodeError as exc:
            report.findings.append(Finding(position, "entry", f"the stored row is not JSON ({exc})"))
            broken = True
            continue
        if not isinstance(entry, dict) or entry.get("seq") != position:
            seq = entry.get("seq") if isinstance(entry, dict) else None
            report.findings.append(
                Finding(position, "entry", f"expected seq {position} here, found {seq!r}: the log has a gap")
            )
            broken = True
            continue
        if not entry_is_well_formed(entry):
            report.findings.append(
                Finding(
                    position,
                    "entry",
                    "neither an accepted call {seq, arrived, envelope} nor a recorded "
                    "refusal {seq, arrived, request, outcome}",
                )
            )
            broken = True
        entries.append(entry)
    report.entries = len(entries)
    return None if broken else entries


def _chain(meta: dict[str, Any], entries: list[dict[str, Any]], report: WorkspaceReport) -> None:
    verifier = ChainVerifier()
    for entry in entries:
        verifier.add_entry(entry)
    for problem in verifier.breaks:
        seq_text, _, detail = problem.partition(": ")
        seq = int(seq_text.split()[-1]) if seq_text.split()[-1].isdigit() else None
        report.findings.append(Finding(seq, "chain", detail or problem))
    if not meta.get("chain_enabled"):
        return
    head = verifier.head() or ZERO_HASH
    report.head = head
    stored = meta.get("chain_head")
    if head != stored and not verifier.breaks:
        last = len(entries) - 1
        report.findings.append(
            Finding(
                last if last >= 0 else None,
                "head",
                f"the stored chain_head {stored} is not the link of the last entry "
                f"(seq {last}: {head}); the log was truncated or the head rewritten",
            )
        )


def _objects(
    stored: dict[str, dict[str, bytes]], report: WorkspaceReport
) -> dict[str, dict[str, Any]] | None:
    """Every object decoded (and readable as its type), or None."""
    out: dict[str, dict[str, Any]] = {}
    broken = False
    for collection, items in stored.items():
        for key, text in items.items():
            try:
                if collection != IDEMPOTENCY_KEYS:
                    from_text(collection, text)
                out.setdefault(collection, {})[key] = _decode(text)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                report.findings.append(
                    Finding(None, f"{collection}/{key}", f"the stored object cannot be read ({exc})")
                )
                broken = True
    return None if broken else out


def verify_workspace(store: Store, workspace: str) -> WorkspaceReport:
    """Every check on one workspace: its rows read, its entries are well
    formed and contiguous, its chain links, its stored head and count match
    the log, and replaying the log gives exactly the stored objects."""
    report = WorkspaceReport(workspace)
    meta = _load_meta(store, workspace, report)
    entries = _entries(store, workspace, report)
    if meta is None:
        return report
    stored_objects = meta.pop("_objects")
    if entries is None:
        return report
    _chain(meta, entries, report)
    objects = _objects(stored_objects, report)
    if objects is None or not report.ok:
        return report
    for divergence in replay_workspace(meta, entries, objects):
        report.findings.append(Finding(divergence.seq, divergence.where, divergence.detail))
    return report


def verify_store(
    store: Store,
    workspace: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[WorkspaceReport]:
    """A report per workspace (or for `workspace` only), in id order.
    `progress(workspace, done, total)` is called after each."""
    ids = [workspace] if workspace is not None else store.workspace_ids()
    reports = []
    for done, wid in enumerate(ids, 1):
        reports.append(verify_workspace(store, wid))
        if progress is not None:
            progress(wid, done, len(ids))
    return reports
