"""A workspace's log as a call sees it: the store's durable part, then the
entries a batch has accepted but not yet written."""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.audit import AuditEntry
from coordinator.engine.workspace import Workspace
from storage import EntryFilter, Store, entry_matches

__all__ = ["LogReader"]

_decode = msgspec.json.decode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


class LogReader:
    """Reads `start <= seq < stop` of one workspace's log.

    `unwritten` is the batch's list of accepted, unwritten entries for the
    workspace (the same list object the batch appends to, so reads stay
    current), or empty outside a batch.
    """

    __slots__ = ("_store", "_ws", "_unwritten")

    def __init__(self, store: Store, ws: Workspace | None, unwritten: list[AuditEntry]) -> None:
        self._store = store
        self._ws = ws
        self._unwritten = unwritten

    def _split(self, ws: Workspace, start: int, stop: int) -> tuple[int, list[AuditEntry]]:
        """Where the durable part of the range ends, and the unwritten entries in it."""
        durable = ws.count - len(self._unwritten)
        lo, hi = max(start - durable, 0), max(stop - durable, 0)
        return min(stop, durable), self._unwritten[lo:hi]

    def entries(
        self, start: int, stop: int, where: EntryFilter | None = None
    ) -> list[dict[str, Any]]:
        """Entries in wire shape (each a fresh copy), by seq."""
        ws = self._ws
        if ws is None:
            return []
        durable_stop, unwritten = self._split(ws, start, stop)
        out = (
            self._store.read_entries(ws.id, start, durable_stop, where)
            if start < durable_stop
            else []
        )
        for entry in unwritten:
            copy = _decode(_encode_sorted(entry))
            if where is None or entry_matches(copy, where):
                out.append(copy)
        return out

    def texts(self, start: int, stop: int) -> list[bytes]:
        """The entries' JSON text as stored (canonical for unwritten ones)."""
        ws = self._ws
        if ws is None:
            return []
        durable_stop, unwritten = self._split(ws, start, stop)
        out = self._store.read_entry_texts(ws.id, start, durable_stop) if start < durable_stop else []
        out.extend(_encode_sorted(e) for e in unwritten)
        return out
