"""Between a workspace in memory and its stored or snapshot forms."""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from coordinator.audit import ChainVerifier, entry_is_well_formed
from coordinator.engine.canonical import ZERO_HASH
from coordinator.engine.log import LogReader
from coordinator.engine.workspace import Workspace
from coordinator.errors import RestoreError
from coordinator.model import (
    DOCUMENT_LAYOUT,
    IDEMPOTENCY_KEYS,
    WorkspaceMeta,
    from_stored,
    to_stored,
)
from storage import MalformedChangeError, StoreChange
from storage.records import WorkspaceRecord, assemble_snapshot, change_from_record

__all__ = ["restore_change", "restore_changes", "snapshot_of"]

log = logging.getLogger("chapline")


def snapshot_of(ws: Workspace, log: LogReader) -> dict[str, Any]:
    """The workspace as a JSON-safe dict: meta, collections keyed by id, audit."""
    objects = [(c, k, to_stored(v)) for c, items in ws.objects.items() for k, v in items.items()]
    entries = log.entries(0, ws.count)
    return assemble_snapshot(msgspec.to_builtins(ws.meta), entries, objects, DOCUMENT_LAYOUT)


_TAKES = (
    "restore() takes a snapshot (the dict coord.snapshot(workspace_id) returns), a list "
    'of them, or {"workspaces": [...]}'
)


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return 'an object without a string "id" (the workspace it holds)'
    return "None" if value is None else f"a {type(value).__name__}"


def restore_changes(data: Any) -> list[StoreChange]:
    """The replace changes for snapshots (one dict, a list, or
    `{"workspaces": [...]}`), all checked before any is written."""
    if isinstance(data, dict) and "workspaces" in data and "id" not in data:
        data = data["workspaces"]
        if not isinstance(data, list):
            raise RestoreError(f'{_TAKES}; got "workspaces": {_kind(data)}')
    if isinstance(data, list):
        for at, item in enumerate(data):
            if not isinstance(item, dict) or not isinstance(item.get("id"), str):
                raise RestoreError(f"{_TAKES}; item {at} of the list is {_kind(item)}")
        return [restore_change(item) for item in data]
    return [restore_change(data)]




def restore_change(item: Any) -> StoreChange:
    """The replace change for one snapshot, checked before anything is written."""
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise RestoreError(f"{_TAKES}; got {_kind(item)}")
    audit = item.get("audit") or []
    if not isinstance(audit, list):
        raise RestoreError(f"workspace {item['id']!r}: 'audit' must be an array of entries")
    for seq, entry in enumerate(audit):
        if not isinstance(entry, dict) or entry.get("seq") != seq:
            raise RestoreError(
                f"workspace {item['id']!r}: audit entry {seq} is missing or out of order"
            )
        if not entry_is_well_formed(entry):
            raise RestoreError(
                f"workspace {item['id']!r}: audit entry {seq} is neither an accepted call "
                "{seq, arrived, envelope} nor a refusal {seq, arrived, request, outcome}"
            )
    if item.get("chain_enabled"):
        verifier = ChainVerifier()
        for entry in audit:
            verifier.add_entry(entry)
        # A chained workspace with no chained entry yet has the zero head.
        head = verifier.head() or ZERO_HASH
        if verifier.breaks or head != item.get("chain_head"):
            problems = "; ".join(verifier.breaks) or "chain_head does not match the log"
            raise RestoreError(f"workspace {item['id']!r}: the hash chain does not verify: {problems}")
    updated = audit[-1].get("arrived") if audit else item.get("created", "")
    try:
        change = change_from_record(
            WorkspaceRecord(item["id"], item, len(audit), updated if isinstance(updated, str) else ""),
            DOCUMENT_LAYOUT,
        )
        # Every object must be one this coordinator can hold.
        for collection, items in change.objects.items():
            for value in items.values():
                if collection != IDEMPOTENCY_KEYS:
                    from_stored(collection, value)
        msgspec.convert(change.meta, WorkspaceMeta)
    except (MalformedChangeError, msgspec.ValidationError) as exc:
        raise RestoreError(f"workspace {item['id']!r}: {exc}") from None
    return change
