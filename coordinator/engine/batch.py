"""What a batch accumulates: calls grouped into one store write per workspace
(SPECIFICATION.md, "Batches").

`WorkspaceBatch` holds one `BatchPart` per workspace the batch writes, so
building each one's store change and undoing it in memory live beside the
data they use. `HeldWorkspaces.run_batch` (held.py) opens a batch, writes it
out, and undoes or runs again what the store did not take.
"""

from __future__ import annotations

from typing import Any

from coordinator.audit import AuditEntry
from coordinator.engine.workspace import Workspace
from coordinator.engine.writes import WorkspaceWrite
from coordinator.errors import RpcError
from coordinator.listeners import RecordedCall
from storage import StoreChange
from storage.types import EntryKeys

__all__ = ["BatchPart", "WorkspaceBatch"]


class BatchPart:
    """One workspace's share of a batch: what it held before, and what the
    batch's calls wrote to it since."""

    __slots__ = (
        "base", "meta", "latest", "created", "undo", "order", "entries", "keys", "objects", "last",
        "calls",
    )

    def __init__(self, ws: Workspace, created: bool) -> None:
        self.base = ws.count  # entries held before the batch
        self.meta = ws.meta  # as before the batch
        self.latest = ws.latest
        self.created = created
        # {collection: {key: value before the batch, None where absent}}
        self.undo: dict[str, dict[str, Any]] = {}
        # {collection: keys in held order}, for collections the batch deletes from
        self.order: dict[str, list[str]] = {}
        self.entries: list[AuditEntry] = []
        self.keys: list[EntryKeys] = []  # each entry's, as its write gave them
        self.objects: dict[str, dict[str, Any]] = {}
        self.last: WorkspaceWrite | None = None
        # (envelope, response) of each call answered from this workspace's
        # provisional state, to rewrite or run again (at a fresh reading)
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def add(self, ws: Workspace, write: WorkspaceWrite) -> None:
        """Take one write (before memory has it, so undo sees old values)."""
        for collection, items in write.objects.items():
            held = ws.objects[collection]
            if None in items.values() and collection not in self.order:
                self.order[collection] = list(held)  # a deletion: undo restores the order
            first = self.undo.setdefault(collection, {})
            for key in items:
                if key not in first:
                    first[key] = held.get(key)
            self.objects.setdefault(collection, {}).update(items)
        self.entries.extend(write.entries)
        self.keys.extend(write.keys)
        self.last = write

    def change(self, workspace_id: str) -> StoreChange:
        """The one store change for everything this part holds."""
        last = self.last
        assert last is not None
        return StoreChange(
            id=workspace_id,
            base=self.base,
            version=self.base + len(self.entries),
            updated_at=last.arrived,
            meta=last.meta,
            entries=self.entries,
            objects=self.objects,
            create=self.created,
            entry_keys=self.keys,
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
        ws.meta, ws.count, ws.latest = self.meta, self.base, self.latest
        ws.put_values(self.undo)
        for collection, keys in self.order.items():
            # `keys` may name objects the batch added before its first
            # deletion; the undo above removed those again.
            held = ws.objects[collection]
            ws.objects[collection] = {key: held[key] for key in keys if key in held}
        ws.refusal_digests = None

    def answer_all(self, error: RpcError) -> None:
        """Rewrite every response this part's calls were given to `error`."""
        for _, response in self.calls:
            response.pop("result", None)
            response["error"] = error.to_wire()


class WorkspaceBatch:
    """A batch in progress: each workspace's part, the entries in call order,
    and the call being dispatched."""

    __slots__ = ("parts", "written", "current")

    def __init__(self) -> None:
        self.parts: dict[str, BatchPart] = {}
        # what listeners are told once the batch is written
        self.written: list[RecordedCall] = []
        # (workspace id, envelope) of the call being dispatched
        self.current: tuple[str, dict[str, Any]] | None = None

    def add(self, write: WorkspaceWrite, answer: dict[str, Any]) -> None:
        """Take one call's write in place of the store (answered `answer`)."""
        ws = write.ws
        part = self.parts.get(ws.id)
        if part is None:
            part = self.parts[ws.id] = BatchPart(ws, write.created)
        part.add(ws, write)
        self.written.extend((ws.id, entry, write.objects, answer) for entry in write.entries)

    def unwritten(self, workspace_id: str) -> list[AuditEntry]:
        """The workspace's entries the batch has accepted and not written
        (the list itself, which grows as the batch does)."""
        part = self.parts.get(workspace_id)
        return part.entries if part is not None else []
