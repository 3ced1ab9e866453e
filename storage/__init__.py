"""Stores: where a coordinator's workspaces live between calls and restarts.

A store applies one `StoreChange` per write, atomically, under a
compare-and-swap on `base` (the number of audit entries the writer believes the
store holds). The audit log lives in the store; `read_entries` reads a range of
one workspace's log without loading the rest.
"""

from __future__ import annotations

from typing import Any, Iterable, Protocol, runtime_checkable

import msgspec

__all__ = [
    "COLLECTIONS",
    "IDEMPOTENCY_KEYS",
    "EntryFilter",
    "HeldWorkspace",
    "MemoryStore",
    "SqliteStore",
    "Store",
    "StoreChange",
    "StoreConflictError",
    "StoreError",
    "WorkspaceRecord",
    "assemble_snapshot",
    "change_from_record",
    "object_key",
]

COLLECTIONS: tuple[str, ...] = (
    "members",
    "tasks",
    "overrides",
    "whispers",
    "deliberations",
    "handoffs",
    "snapshots",
    "route_decisions",
)
IDEMPOTENCY_KEYS = "idempotency_keys"

# Everything a workspace's meta row does not hold.
_NOT_META = frozenset(COLLECTIONS) | {IDEMPOTENCY_KEYS, "audit"}


class StoreChange(msgspec.Struct, frozen=True):
    """One atomic write to one workspace.

    `entries` are audit entries in wire shape, the first at seq `base`;
    `objects` maps collection -> key -> value, where `None` deletes the key;
    `meta` replaces the workspace's own fields; `replace` drops everything the
    store holds for the workspace first (and skips the `base` check).
    """

    id: str
    base: int
    version: int
    updated_at: str
    meta: dict[str, Any] = {}
    entries: list[Any] = []
    objects: dict[str, dict[str, Any]] = {}
    replace: bool = False


class WorkspaceRecord(msgspec.Struct, frozen=True):
    """A whole workspace as a store returns it from `load`."""

    id: str
    data: dict[str, Any]
    version: int
    updated_at: str


class HeldWorkspace(msgspec.Struct, frozen=True):
    """A workspace as a coordinator starts from it: its own fields, its entry
    count, and each object as the JSON text the store holds, undecoded (a
    coordinator decodes an object when a call first uses it)."""

    id: str
    meta: dict[str, Any]
    version: int
    updated_at: str
    objects: dict[str, dict[str, bytes]]


class EntryFilter(msgspec.Struct, frozen=True):
    """Which audit entries `read_entries` returns.

    Each field that is not `None` must match: `method`, `sender` (params.from)
    and `task_id` (params.task_id) are compared with the recorded call, whether
    it was accepted (`envelope`) or refused (`request`); `outcome` is
    "accepted" or "refused".
    """

    method: Any = None
    sender: Any = None
    task_id: Any = None
    outcome: str | None = None


class StoreError(Exception):
    """Base class of the errors a store raises on purpose."""


class StoreConflictError(StoreError):
    """The store's log for `workspace` does not end where the writer expected.

    `held` is the number of entries the store holds, `base` what the change
    assumed. Nothing was written.
    """

    def __init__(self, workspace: str, held: int, base: int) -> None:
        self.workspace = workspace
        self.held = held
        self.base = base
        super().__init__(
            f"workspace {workspace!r}: the store holds {held} audit entries but "
            f"this write assumed {base}, so nothing was written. Another writer "
            "changed this workspace since it was loaded; reload the workspace "
            "from the store and retry the call."
        )

    def __reduce__(self):  # keep the three attributes through pickling
        return (type(self), (self.workspace, self.held, self.base))


@runtime_checkable
class Store(Protocol):
    """What a coordinator needs from a store (see SPECIFICATION.md, "Stores")."""

    def load(self, *, entries: bool = True, workspace: str | None = None) -> list[WorkspaceRecord]:
        """Every readable workspace (or only `workspace`); without `entries`,
        `data` has no "audit" and the log is not read."""
        ...

    def workspace_ids(self) -> list[str]:
        """The id of every workspace the store holds rows of, readable or
        not, in id order."""
        ...

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        """Every readable workspace (or only `workspace`) without its log, its
        objects as stored JSON text; skips a workspace as `load` does."""
        ...

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        """Entries with `start <= seq < stop` (and matching `where`), by seq."""
        ...

    def read_entry_texts(
        self, workspace: str, start: int = 0, stop: int | None = None
    ) -> list[bytes]:
        """The same range as JSON text, undecoded (chain verification hashes it)."""
        ...

    def apply(self, change: StoreChange) -> None: ...

    def save(self, record: WorkspaceRecord) -> None: ...

    def delete(self, workspace: str) -> None: ...

    def close(self) -> None: ...


def object_key(collection: str, item: Any) -> str | None:
    """The key an object is stored under in its collection (members by uri)."""
    if not isinstance(item, dict):
        return None
    key = item.get("uri") if collection == "members" else item.get("id")
    return key if isinstance(key, str) else None


def _keyed(collection: str, value: Any) -> dict[str, Any]:
    """A collection as dict keyed by id, whether given keyed or as an array."""
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for item in value:
            key = object_key(collection, item)
            if key is None:
                raise ValueError(
                    f"an item of collection {collection!r} has no string "
                    f"{'uri' if collection == 'members' else 'id'}"
                )
            out[key] = item
        return out
    if value is None:
        return {}
    raise ValueError(f"collection {collection!r} must be an object or an array")


def change_from_record(record: WorkspaceRecord) -> StoreChange:
    """The `replace` change that writes a whole workspace record."""
    data = record.data
    meta = {k: v for k, v in data.items() if k not in _NOT_META}
    meta.setdefault("id", record.id)
    objects = {c: _keyed(c, data.get(c)) for c in COLLECTIONS}
    keys = data.get(IDEMPOTENCY_KEYS)
    if keys is not None:
        if not isinstance(keys, dict):
            raise ValueError("idempotency_keys must be an object of key -> task id")
        objects[IDEMPOTENCY_KEYS] = dict(keys)
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


from storage.memory import MemoryStore  # noqa: E402  (the stores use the types above)
from storage.sqlite import SqliteStore  # noqa: E402
