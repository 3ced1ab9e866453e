"""MemoryStore: the store contract in process memory.

Nothing a caller changes after a write leaks into a later `load` or
`read_entries`: it keeps JSON text of what it is given, except frozen Structs,
which nobody can change and which it keeps as they are until read
(`storage._encode.hold_change`). So a write costs no encoding of what the
coordinator hands it (frozen entries, metas and objects), and the filter
index is brought up to date by the filtered read that needs it, from the
keys the writer gave with each entry where it gave them
(`StoreChange.entry_keys`), else by reading the entry's call.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any

from storage._encode import Held, Prepared, held_text, hold_change
from storage._encode import decode as _decode
from storage._mypyc import mypyc_attr
from storage.match import KEY_FIELDS, entry_matches, indexed_keys, struct_keys, text_keys
from storage.records import SHARED_LAYOUT, WorkspaceRecord, assemble_snapshot
from storage.types import (
    EntryFilter,
    EntryKeys,
    HeldWorkspace,
    Store,
    StoreChange,
    StoreConflictError,
    WorkspaceExistsError,
)

__all__ = ["MemoryStore"]


class _Workspace:
    __slots__ = ("meta", "version", "updated_at", "entries", "keys", "objects", "index", "indexed")

    def __init__(self) -> None:
        self.meta: Held = b"{}"
        self.version = 0
        self.updated_at = ""
        self.entries: list[Held] = []
        # each entry's keys as its writer gave them, None where it gave none
        self.keys: list[EntryKeys | None] = []
        self.objects: dict[str, dict[str, Held]] = {}
        # filter field -> value -> seqs in order, so a filtered read decodes
        # only its candidates (see storage.match.entry_key). A field is
        # indexed from its first filtered read on, and each filtered read
        # first files the entries written since the last one (`indexed` is
        # how many are filed), so writes never pay for it.
        self.index: dict[str, dict[str, list[int]]] = {}
        self.indexed = 0


def _bounds(ws: _Workspace, start: int, stop: int | None) -> tuple[int, int]:
    """`start <= seq < stop` as list bounds. Seq bounds, not Python slice
    semantics: a negative stop selects nothing, as `seq < stop` does in SQL."""
    high = len(ws.entries) if stop is None else max(min(stop, len(ws.entries)), 0)
    return max(start, 0), high


def _file(ws: _Workspace, fields: list[str], start: int, stop: int) -> None:
    """File entries `start <= seq < stop` in the indexes on `fields`."""
    by_field = [ws.index[field] for field in fields]
    at = [KEY_FIELDS.index(field) for field in fields]
    for seq in range(start, stop):
        given = ws.keys[seq]
        if given is not None:
            keys: list[str | None] = [given[i] for i in at]
        else:
            held = ws.entries[seq]
            keys = text_keys(held, fields) if isinstance(held, bytes) else struct_keys(held, fields)
        for n, by_value in enumerate(by_field):
            value = keys[n]
            if value is not None:
                seqs = by_value.get(value)
                if seqs is None:
                    by_value[value] = [seq]
                else:
                    seqs.append(seq)


def _indexed(ws: _Workspace, field: str) -> dict[str, list[int]]:
    """The index on `field`, up to date with the held log (built on first use)."""
    held = len(ws.entries)
    if ws.indexed < held and ws.index:
        _file(ws, list(ws.index), ws.indexed, held)
    if field not in ws.index:
        ws.index[field] = {}
        _file(ws, [field], 0, held)
    ws.indexed = held
    return ws.index[field]


def _held(wid: str, ws: _Workspace) -> HeldWorkspace:
    objects = {c: {k: held_text(v) for k, v in items.items()} for c, items in ws.objects.items()}
    return HeldWorkspace(wid, _decode(held_text(ws.meta)), ws.version, ws.updated_at, objects)


def _record(held: HeldWorkspace, log: list[Any] | None) -> WorkspaceRecord:
    """The decoded record of a held workspace; `log` None leaves "audit" out."""
    items = [(c, k, _decode(v)) for c, objs in held.objects.items() for k, v in objs.items()]
    return WorkspaceRecord(
        held.id, assemble_snapshot(held.meta, log, items, SHARED_LAYOUT), held.version, held.updated_at
    )


_DOC = """A store held in memory; `close()` empties it. It writes one change at a
    time, so `apply_many` is the protocol's one-by-one default."""


# Compiled (setup.py); applications subclass it, to wrap or fail its writes.
# Its docstring is _DOC, set after the class: compiled, a class keeps only its
# signature there.
@mypyc_attr(allow_interpreted_subclasses=True)
class MemoryStore(Store):

    def __init__(self) -> None:
        self._workspaces: dict[str, _Workspace] = {}
        self._lock = threading.Lock()

    def apply(self, change: StoreChange) -> None:
        # Prepare everything first: an unencodable value fails the whole
        # change before anything is touched.
        encoded = hold_change(change)
        with self._lock:
            self._apply_encoded(change, encoded)

    def _apply_encoded(self, change: StoreChange, encoded: Prepared[Held]) -> None:
        wid, base, replace = change.id, change.base, change.replace  # each a generic lookup
        ws = self._workspaces.get(wid)
        held = 0 if ws is None else len(ws.entries)
        if encoded.create and ws is not None:
            raise WorkspaceExistsError(wid, held, base)
        if not replace and base != held:
            raise StoreConflictError(wid, held, base)
        # Nothing below can fail (the change is already encoded), so the held
        # state is changed in place: a write costs the same at any log length.
        if ws is None or replace:
            ws = self._workspaces[wid] = _Workspace()
        ws.entries += encoded.entries
        given = encoded.entry_keys
        ws.keys += [None] * len(encoded.entries) if given is None else given
        ws.meta = encoded.meta
        ws.version = change.version
        ws.updated_at = change.updated_at
        for c, k, body in encoded.objects:
            if body is None:
                ws.objects.get(c, {}).pop(k, None)
            else:
                ws.objects.setdefault(c, {})[k] = body

    def _held(self, workspace: str | None) -> list[tuple[str, _Workspace]]:
        if workspace is None:
            return sorted(self._workspaces.items())
        ws = self._workspaces.get(workspace)
        return [] if ws is None else [(workspace, ws)]

    def workspace_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._workspaces)

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        with self._lock:
            return [_held(wid, ws) for wid, ws in self._held(workspace)]

    def load(self, *, entries: bool = True, workspace: str | None = None) -> list[WorkspaceRecord]:
        # Copy the held text under the lock (writers change it in place), then
        # decode outside it.
        with self._lock:
            held = [
                (_held(wid, ws), list(ws.entries) if entries else None)
                for wid, ws in self._held(workspace)
            ]
        return [
            _record(h, None if log is None else [_decode(held_text(e)) for e in log]) for h, log in held
        ]

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        with self._lock:
            ws = self._workspaces.get(workspace)
            if ws is None:
                return []
            low, high = _bounds(ws, start, stop)
            keys = [] if where is None else indexed_keys(where)
            if keys:
                seqs = min((_indexed(ws, field).get(value, []) for field, value in keys), key=len)
                seqs = seqs[bisect.bisect_left(seqs, low) : bisect.bisect_left(seqs, high)]
                rows = [ws.entries[s] for s in seqs]
            else:
                rows = ws.entries[low:high]
        decoded = [_decode(held_text(e)) for e in rows]
        if where is None:
            return decoded
        return [e for e in decoded if entry_matches(e, where)]

    def read_entry_texts(self, workspace: str, start: int = 0, stop: int | None = None) -> list[bytes]:
        """The held JSON text of entries `start <= seq < stop`, by seq, undecoded."""
        with self._lock:
            ws = self._workspaces.get(workspace)
            if ws is None:
                return []
            low, high = _bounds(ws, start, stop)
            held = ws.entries[low:high]
        return [held_text(e) for e in held]

    def delete(self, workspace: str) -> None:
        with self._lock:
            self._workspaces.pop(workspace, None)

    def close(self) -> None:
        with self._lock:
            self._workspaces.clear()


# mypyc compiles an assignment to a class's attribute only for attributes it
# declares; setattr is the plain Python one, which a compiled class allows.
setattr(MemoryStore, "__doc__", _DOC)  # noqa: B010
