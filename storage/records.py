"""Whole-workspace records (the snapshot shape) and the changes that write them.

A record is one workspace as one JSON document: its own fields, each
collection as an object keyed by id, the maps (idempotency keys), and `audit`,
the log. Which fields are collections is not the store's to know: the caller
gives it as a `DocumentLayout` (the coordinator its own, in
coordinator/model.py). The stores use one layout themselves, `SHARED_LAYOUT`:
the collections of the shared schema's workspace document (0.3.x's
`Workspace`), which `load()` shows and the pre-0.3.2 one-table files hold
(SPECIFICATION.md, "SQLite file layout").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from storage.types import MalformedChangeError, StoreChange

__all__ = [
    "SHARED_LAYOUT",
    "DocumentLayout",
    "WorkspaceRecord",
    "assemble_snapshot",
    "change_from_record",
]


class WorkspaceRecord(msgspec.Struct, frozen=True):
    """A whole workspace as a store's `load()` returns it: `data` is the
    snapshot shape, `version` the number of entries held."""

    id: str
    data: dict[str, Any]
    version: int
    updated_at: str


class DocumentLayout(msgspec.Struct, frozen=True):
    """Which fields of a workspace document are not its own fields.

    - `collections`: every one, in the order a change writes them; each
      holds objects keyed by their `id` (or the field `keyed_by` names),
      given as an object or as an array of them, unless it is one of
    - `maps`: key -> value objects (`idempotency_keys`), each with the words
      that say what it holds and how to give it, for a refusal;
    - `shown`: those a document shows even when empty (the others only when
      it holds something).
    """

    collections: tuple[str, ...]
    maps: dict[str, tuple[str, str]]
    shown: tuple[str, ...]
    keyed_by: dict[str, str] = {}


# The shared schema's workspace document: 0.3.x's collections and its map.
_CHAP_COLLECTIONS = (
    "members",
    "tasks",
    "overrides",
    "whispers",
    "deliberations",
    "handoffs",
    "snapshots",
    "route_decisions",
)
_IDEMPOTENCY_KEYS = "idempotency_keys"
SHARED_LAYOUT = DocumentLayout(
    collections=(*_CHAP_COLLECTIONS, _IDEMPOTENCY_KEYS),
    maps={_IDEMPOTENCY_KEYS: ("key -> task id", "Give it as {key: task_id}.")},
    shown=(*_CHAP_COLLECTIONS, _IDEMPOTENCY_KEYS),
    keyed_by={"members": "uri"},
)


def _keyed(workspace: str, collection: str, value: Any, field: str) -> dict[str, Any]:
    """A collection as dict keyed by `field`, whether given keyed or as an array."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            key = item.get(field) if isinstance(item, dict) else None
            if not isinstance(key, str):
                raise MalformedChangeError(
                    workspace,
                    f"an item of collection {collection!r} has no string {field}",
                    "Give every item its key, or give the collection as an object keyed by it.",
                )
            out[key] = item
        return out
    if value is None:
        return {}
    raise MalformedChangeError(
        workspace,
        f"collection {collection!r} must be an object or an array",
        "Give it as {key: item} or as [item, ...].",
    )


def change_from_record(record: WorkspaceRecord, layout: DocumentLayout) -> StoreChange:
    """The `replace` change that writes a whole workspace record, whose
    collections and maps `layout` names (every other field but `audit` is
    the workspace's own)."""
    data = record.data
    meta = {k: v for k, v in data.items() if k not in layout.collections and k != "audit"}
    meta.setdefault("id", record.id)
    objects: dict[str, dict[str, Any]] = {}
    for c in layout.collections:
        value = data.get(c)
        if c in layout.maps:
            if value is None:
                continue
            holds, remedy = layout.maps[c]
            if not isinstance(value, dict):
                raise MalformedChangeError(record.id, f"{c} must be an object of {holds}", remedy)
            objects[c] = dict(value)
        elif c in layout.shown or value is not None:
            objects[c] = _keyed(record.id, c, value, layout.keyed_by.get(c, "id"))
    objects = {c: v for c, v in objects.items() if v}
    entries = list(data.get("audit") or [])
    return StoreChange(
        id=record.id,
        base=0,
        version=len(entries),
        updated_at=record.updated_at,
        meta=meta,
        entries=entries,
        objects=objects,
        replace=True,
    )


def assemble_snapshot(
    meta: dict[str, Any],
    entries: list[Any] | None,
    objects: Iterable[tuple[str, str, Any]],
    layout: DocumentLayout,
) -> dict[str, Any]:
    """A workspace in the snapshot shape: meta fields, then each collection
    and map `layout` shows (empty when nothing is held), then every other
    collection the workspace holds, keyed by id, and `audit` as the ordered
    log (left out when `entries` is None)."""
    out = dict(meta)
    for c in layout.shown:
        out[c] = {}
    for collection, key, value in objects:
        out.setdefault(collection, {})[key] = value
    if entries is not None:
        out["audit"] = list(entries)
    return out
