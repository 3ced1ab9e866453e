"""`RemoteCoordinator.workspaces`: the read views 0.3.3 code uses
(`workspaces[id].members[uri].role`, `.tasks`, `.chain_head`, `in`, `len`,
...), built from the server's snapshot read. As the embedded views
(coordinator/compat.py) they are read-only and read the current state at each
access: every attribute read asks the server again."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from coordinator.audit import AuditEntry
from coordinator.model import COLLECTIONS, IDEMPOTENCY_KEYS, from_text

__all__ = ["RemoteWorkspace", "RemoteWorkspaces"]

Snapshot = Callable[[str], dict[str, Any] | None]
_encode = msgspec.json.Encoder().encode


class RemoteWorkspace:
    """One workspace as 0.3.3's readers see it: its fields, each collection
    as a read-only mapping of the values the embedded view gives (frozen
    Structs for CHAP's collections), `audit` as `AuditEntry`s."""

    __slots__ = ("_id", "_snapshot")

    def __init__(self, workspace_id: str, snapshot: Snapshot) -> None:
        self._id = workspace_id
        self._snapshot = snapshot

    @property
    def id(self) -> str:
        return self._id

    def _read(self) -> dict[str, Any]:
        found = self._snapshot(self._id)
        if found is None:
            raise KeyError(f"workspace {self._id!r} is no longer held by the server")
        return found

    @property
    def audit(self) -> tuple[AuditEntry, ...]:
        return tuple(msgspec.convert(e, AuditEntry) for e in self._read()["audit"])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        data = self._read()
        if name in COLLECTIONS:
            items = {k: from_text(name, _encode(v)) for k, v in data[name].items()}
            return _ReadOnly(items)
        if name == IDEMPOTENCY_KEYS:
            return _ReadOnly(dict(data.get(name, {})))
        if name == "audit" or name not in data:
            raise AttributeError(f"a workspace view has no attribute {name!r}")
        return data[name]

    def __repr__(self) -> str:
        return f"<remote workspace {self._id}>"


class _ReadOnly(Mapping[str, Any]):
    __slots__ = ("_items",)

    def __init__(self, items: dict[str, Any]) -> None:
        self._items = items

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


class RemoteWorkspaces(Mapping[str, RemoteWorkspace]):
    """Workspace id -> `RemoteWorkspace`, for the workspaces the server holds."""

    __slots__ = ("_ids", "_snapshot")

    def __init__(self, ids: Callable[[], list[str]], snapshot: Snapshot) -> None:
        self._ids = ids
        self._snapshot = snapshot

    def __getitem__(self, workspace_id: str) -> RemoteWorkspace:
        if not isinstance(workspace_id, str) or self._snapshot(workspace_id) is None:
            raise KeyError(workspace_id)
        return RemoteWorkspace(workspace_id, self._snapshot)

    def __contains__(self, workspace_id: object) -> bool:
        return isinstance(workspace_id, str) and self._snapshot(workspace_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids())

    def __len__(self) -> int:
        return len(self._ids())
