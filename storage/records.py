"""Between whole-workspace records (snapshots) and store changes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from storage.types import (
    COLLECTIONS,
    EXTENSION_COLLECTIONS,
    IDEMPOTENCY_KEYS,
    SIGNED_CALLS,
    MalformedChangeError,
    StoreChange,
    WorkspaceRecord,
)

__all__ = ["assemble_snapshot", "change_from_record", "object_key"]

# Everything a workspace's meta row does not hold.
_NOT_META = (
    frozenset(COLLECTIONS) | frozenset(EXTENSION_COLLECTIONS) | {IDEMPOTENCY_KEYS, SIGNED_CALLS, "audit"}
)


def object_key(collection: str, item: Any) -> str | None:
    """The key an object is stored under in its collection (members by uri)."""
    if not isinstance(item, dict):
        return None
    key = item.get("uri") if collection == "members" else item.get("id")
    return key if isinstance(key, str) else None


def _keyed(workspace: str, collection: str, value: Any) -> dict[str, Any]:
    """A collection as dict keyed by id, whether given keyed or as an array."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            key = object_key(collection, item)
            if key is None:
                raise MalformedChangeError(
                    workspace,
                    f"an item of collection {collection!r} has no string "
                    f"{'uri' if collection == 'members' else 'id'}",
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


def change_from_record(record: WorkspaceRecord) -> StoreChange:
    """The `replace` change that writes a whole workspace record."""
    data = record.data
    meta = {k: v for k, v in data.items() if k not in _NOT_META}
    meta.setdefault("id", record.id)
    objects = {c: _keyed(record.id, c, data.get(c)) for c in COLLECTIONS}
    keys = data.get(IDEMPOTENCY_KEYS)
    if keys is not None:
        if not isinstance(keys, dict):
            raise MalformedChangeError(
                record.id,
                "idempotency_keys must be an object of key -> task id",
                "Give it as {key: task_id}.",
            )
        objects[IDEMPOTENCY_KEYS] = dict(keys)
    signed = data.get(SIGNED_CALLS)
    if signed is not None:
        if not isinstance(signed, dict):
            raise MalformedChangeError(
                record.id,
                "signed_calls must be an object of signed digest -> {seq, result}",
                "Give it as a snapshot() wrote it, or leave it out.",
            )
        objects[SIGNED_CALLS] = dict(signed)
    for c in EXTENSION_COLLECTIONS:
        if data.get(c) is not None:
            objects[c] = _keyed(record.id, c, data[c])
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
) -> dict[str, Any]:
    """A workspace in the snapshot shape: meta fields, collections keyed by id,
    `idempotency_keys`, and `audit` as the ordered log (left out when
    `entries` is None)."""
    out = dict(meta)
    for c in COLLECTIONS:
        out[c] = {}
    out[IDEMPOTENCY_KEYS] = {}
    for collection, key, value in objects:
        out.setdefault(collection, {})[key] = value
    if entries is not None:
        out["audit"] = list(entries)
    return out
