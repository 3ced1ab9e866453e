"""MemoryStore: the store contract in process memory.

It keeps JSON text, not the caller's objects, so nothing a caller changes
after a write leaks into a later `load` or `read_entries`.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from storage import (
    EntryFilter,
    StoreChange,
    StoreConflictError,
    WorkspaceRecord,
    assemble_snapshot,
    change_from_record,
)
from storage._match import entry_matches

__all__ = ["MemoryStore"]

_encode = msgspec.json.Encoder(order="sorted").encode
_decode = msgspec.json.decode


class _Workspace:
    __slots__ = ("meta", "version", "updated_at", "entries", "objects")

    def __init__(self) -> None:
        self.meta = b"{}"
        self.version = 0
        self.updated_at = ""
        self.entries: list[bytes] = []
        self.objects: dict[str, dict[str, bytes]] = {}


class MemoryStore:
    """A store held in memory; `close()` empties it."""

    def __init__(self) -> None:
        self._workspaces: dict[str, _Workspace] = {}
        self._lock = threading.Lock()

    def apply(self, change: StoreChange) -> None:
        # Serialise everything first: an unencodable value fails the whole
        # change before anything is touched.
        meta = _encode(change.meta)
        entries = [_encode(e) for e in change.entries]
        objects = {
            c: {k: (None if v is None else _encode(v)) for k, v in items.items()}
            for c, items in change.objects.items()
        }
        with self._lock:
            ws = self._workspaces.get(change.id)
            if change.replace or ws is None:
                held = 0 if ws is None else len(ws.entries)
                if not change.replace and change.base != held:
                    raise StoreConflictError(change.id, held, change.base)
                ws = _Workspace()
            elif change.base != len(ws.entries):
                raise StoreConflictError(change.id, len(ws.entries), change.base)
            else:
                # Work on copies so a failure below leaves the held state as it was.
                new = _Workspace()
                new.entries = ws.entries
                new.objects = {c: dict(items) for c, items in ws.objects.items()}
                ws = new
            ws.meta = meta
            ws.version = change.version
            ws.updated_at = change.updated_at
            ws.entries = ws.entries + entries if ws.entries else entries
            for c, items in objects.items():
                held_items = ws.objects.setdefault(c, {})
                for k, v in items.items():
                    if v is None:
                        held_items.pop(k, None)
                    else:
                        held_items[k] = v
            self._workspaces[change.id] = ws

    def save(self, record: WorkspaceRecord) -> None:
        self.apply(change_from_record(record))

    def load(self, *, entries: bool = True) -> list[WorkspaceRecord]:
        with self._lock:
            held = list(self._workspaces.items())
        out = []
        for wid, ws in held:
            objects = [
                (c, k, _decode(v)) for c, items in ws.objects.items() for k, v in items.items()
            ]
            log = [_decode(e) for e in ws.entries] if entries else []
            data = assemble_snapshot(_decode(ws.meta), log, objects)
            if not entries:
                del data["audit"]
            out.append(WorkspaceRecord(wid, data, ws.version, ws.updated_at))
        return out

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        ws = self._workspaces.get(workspace)
        if ws is None:
            return []
        rows = ws.entries[max(start, 0) : stop]
        decoded = [_decode(e) for e in rows]
        if where is None:
            return decoded
        return [e for e in decoded if entry_matches(e, where)]

    def delete(self, workspace: str) -> None:
        with self._lock:
            self._workspaces.pop(workspace, None)

    def close(self) -> None:
        with self._lock:
            self._workspaces.clear()
