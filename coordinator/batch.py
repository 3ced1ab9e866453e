"""A batch in progress: per workspace, the unwritten change and how to undo it.

The Coordinator drives batches (`Coordinator.batch`); this module holds what
a batch accumulates, so that building its store change and undoing it in
memory live beside the data they use.
"""

from __future__ import annotations

from typing import Any

from coordinator.audit import AuditEntry
from coordinator.call import Call
from coordinator.workspace import Workspace
from storage import StoreChange

__all__ = ["Pending", "Part", "put_values"]


def put_values(ws: Workspace, values: dict[str, dict[str, Any]]) -> None:
    """Set each collection's keys to the values given; None removes the key.
    (Held objects are never None, so None can stand for "absent".)"""
    for collection, items in values.items():
        held = ws.objects[collection]
        for key, value in items.items():
            if value is None:
                held.pop(key, None)
            else:
                held[key] = value


class Part:
    """One workspace's share of a batch."""

    __slots__ = ("base", "meta", "created", "undo", "order", "entries", "objects", "last", "calls")

    def __init__(self, ws: Workspace, created: bool) -> None:
        self.base = ws.count  # entries held before the batch
        self.meta = ws.meta  # as before the batch
        self.created = created
        # {collection: {key: value before the batch, None where absent}}
        self.undo: dict[str, dict[str, Any]] = {}
        # {collection: keys in held order}, for collections the batch deletes from
        self.order: dict[str, list[str]] = {}
        self.entries: list[AuditEntry] = []
        self.objects: dict[str, dict[str, Any]] = {}
        self.last: StoreChange | None = None
        # (envelope, arrived, response) of each call answered from this
        # workspace's provisional state, to rewrite or re-run it
        self.calls: list[tuple[dict[str, Any], str, dict[str, Any]]] = []

    def add(self, ws: Workspace, call: Call, change: StoreChange) -> None:
        """Take one call's change (before memory has it, so undo sees old values)."""
        for collection, items in call.staged.items():
            held = ws.objects[collection]
            if None in items.values() and collection not in self.order:
                self.order[collection] = list(held)  # a deletion: undo restores the order
            first = self.undo.setdefault(collection, {})
            for key in items:
                if key not in first:
                    first[key] = held.get(key)
            self.objects.setdefault(collection, {}).update(items)
        self.entries.extend(change.entries)
        self.last = change

    def change(self, workspace_id: str) -> StoreChange:
        """The one store change for everything this part holds."""
        last = self.last
        assert last is not None
        return StoreChange(
            id=workspace_id,
            base=self.base,
            version=self.base + len(self.entries),
            updated_at=last.updated_at,
            meta=last.meta,
            entries=self.entries,
            objects=self.objects,
            create=self.created,
        )

    def settle_into(self, ws: Workspace) -> None:
        """After the write: put memory's collections in the order the store
        keeps them. Where the batch deleted and put back an object, memory
        moved it to the end, but the store (which only saw the final put)
        kept it in place."""
        for collection, keys in self.order.items():
            held = ws.objects[collection]
            undo = self.undo.get(collection, {})
            settled = {
                key: held[key]
                for key in keys
                if key in held and (key not in undo or undo[key] is not None)
            }
            for key in [*self.objects.get(collection, {}), *held]:
                if key in held and key not in settled:
                    settled[key] = held[key]
            ws.objects[collection] = settled

    def undo_into(self, ws: Workspace) -> None:
        """Put the workspace back as it was before the batch."""
        ws.meta, ws.count = self.meta, self.base
        put_values(ws, self.undo)
        for collection, keys in self.order.items():
            # `keys` may name objects the batch added before its first
            # deletion; the undo above removed those again.
            held = ws.objects[collection]
            ws.objects[collection] = {key: held[key] for key in keys if key in held}
        ws.refusal_digests = None


class Pending:
    """A batch in progress: each workspace's part, and the entries in call order."""

    __slots__ = ("parts", "written", "current")

    def __init__(self) -> None:
        self.parts: dict[str, Part] = {}
        self.written: list[tuple[str, AuditEntry]] = []
        # (workspace id, envelope, arrived) of the call being dispatched
        self.current: tuple[str, dict[str, Any], str] | None = None
