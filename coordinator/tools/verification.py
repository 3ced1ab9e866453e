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

from coordinator.audit import entry_is_well_formed, record_of
from coordinator.engine.canonical import ZERO_HASH, canonical_bytes, link_hash
from coordinator.errors import CanonicalError
from coordinator.model import IDEMPOTENCY_KEYS, from_text
from coordinator.tools.replay import replay_workspace
from storage import Store

__all__ = ["Finding", "WorkspaceReport", "verify_store", "verify_workspace"]

_decode = msgspec.json.Decoder().decode


@dataclass(frozen=True)
class Finding:
    """One thing that does not hold. `seq` is the entry it is at, if any;
    `where` names the part: "meta", "entry", "chain", "head" or
    "collection/key" for an object. A link that does not match carries the
    hash the chain records for the entry (`expected`: the next entry's
    prev_hash, or the stored chain_head) and the one recomputed from the
    entry as stored (`actual`)."""

    seq: int | None
    where: str
    detail: str
    expected: str | None = None
    actual: str | None = None

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
                {
                    "seq": f.seq,
                    "where": f.where,
                    "detail": f.detail,
                    "expected": f.expected,
                    "actual": f.actual,
                }
                for f in self.findings
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
    # A store warns about a workspace it still loads only when its stored
    # entry count disagrees with the log it holds.
    recount = bool(captured.messages)
    return {"id": workspace, **held[0].meta, "_objects": held[0].objects, "_recount": recount}


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


def _links(entries: list[dict[str, Any]], report: WorkspaceReport) -> list[tuple[int, str | None]]:
    """(seq, link) of each entry from the first chained one on, each link
    recomputed from the entry as stored (None: it has none)."""
    start = next((i for i, e in enumerate(entries) if "prev_hash" in e), None)
    if start is None:
        return []
    first = entries[start]["prev_hash"]
    if first != ZERO_HASH:
        report.findings.append(
            Finding(
                start,
                "chain",
                "the first chained entry does not start from the zero hash: entries before "
                "it were removed, or its prev_hash was changed",
                ZERO_HASH,
                first if isinstance(first, str) else None,
            )
        )
    links: list[tuple[int, str | None]] = []
    before: str | None = ZERO_HASH
    for seq, entry in enumerate(entries[start:], start):
        prev = entry.get("prev_hash")
        if not isinstance(prev, str):
            report.findings.append(
                Finding(
                    seq,
                    "chain",
                    f"it carries no prev_hash, though the chain begins at seq {start}",
                    before,
                    None,
                )
            )
            prev = before or ""
        try:
            before = link_hash(canonical_bytes(record_of(entry)), prev)
        except CanonicalError as exc:
            report.findings.append(
                Finding(seq, "chain", f"its record has no RFC 8785 form ({exc}), so no link")
            )
            before = None
        links.append((seq, before))
    return links


def _brief(digest: Any) -> str:
    """A hash as people compare it (the finding carries it whole)."""
    return f"{digest[:19]}…" if isinstance(digest, str) and len(digest) > 19 else repr(digest)


def _chain(
    meta: dict[str, Any], entries: list[dict[str, Any]], report: WorkspaceReport, recount: bool
) -> None:
    """Each entry's link against what the chain records for it: the next
    entry's prev_hash, and for the last one the stored chain_head. A mismatch
    is reported at the entry whose link it is: the entry whose stored bytes no
    longer hash to what was recorded when the next one was written.
    `recount`: the store holds another number of entries than it counted."""
    links = _links(entries, report)
    for seq, link in links[:-1]:
        recorded = entries[seq + 1].get("prev_hash")  # a seq is its position (checked before)
        if link is not None and isinstance(recorded, str) and link != recorded:
            report.findings.append(
                Finding(
                    seq,
                    "chain",
                    f"changed after it was chained: its link is {_brief(link)}, but seq {seq + 1} "
                    f"records {_brief(recorded)} (or seq {seq + 1}'s prev_hash was changed)",
                    recorded,
                    link,
                )
            )
    if not meta.get("chain_enabled"):
        return
    head = links[-1][1] if links else ZERO_HASH
    report.head = head
    stored = meta.get("chain_head")
    if head is None or head == stored:
        return
    expected = stored if isinstance(stored, str) else None
    if not links:
        finding = Finding(
            None,
            "head",
            f"no entry is chained, but the stored chain_head is {_brief(stored)}, not the zero hash: "
            "the chained entries were removed, or the head rewritten",
            expected,
            head,
        )
    elif recount:
        finding = Finding(
            links[-1][0],
            "head",
            f"the log was truncated after this entry: the store counts other entries than it "
            f"holds, and the stored chain_head {_brief(stored)} is not this last entry's link {_brief(head)}",
            expected,
            head,
        )
    else:
        finding = Finding(
            links[-1][0],
            "chain",
            f"changed after it was chained: its link is {_brief(head)}, but the stored chain_head "
            f"records {_brief(stored)} (or the head was rewritten)",
            expected,
            head,
        )
    report.findings.append(finding)


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
    recount = meta.pop("_recount")
    if entries is None:
        return report
    _chain(meta, entries, report, recount)
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
