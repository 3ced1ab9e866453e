"""Batches: calls grouped into one store write per workspace.

`run_batch` is `Coordinator.batch`; `Pending` and `Part` hold what a batch
accumulates, so building its store change and undoing it in memory live
beside the data they use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from coordinator.audit import AuditEntry
from coordinator.engine.call import Call
from coordinator.engine.wire import INTERNAL_ERROR, STORE_CONFLICT
from coordinator.engine.workspace import Workspace
from coordinator.engine.writes import apply_changes
from coordinator.errors import BatchWriteError, RpcError
from coordinator.listeners import Record
from storage import StoreChange

if TYPE_CHECKING:
    from coordinator.engine.pipeline import Pipeline

__all__ = ["Part", "Pending", "put_values", "run_batch"]

log = logging.getLogger("chapline")


def put_values(ws: Workspace, values: dict[str, dict[str, Any]]) -> None:
    """Set each collection's keys to the values given; None removes the key.
    (Held objects are never None, so None can stand for "absent".)"""
    for collection, items in values.items():
        if collection in ws.indexes:
            for key, value in items.items():
                ws.put(collection, key, value)
            continue
        held = ws.objects[collection]  # the common case, without a call per key
        for key, value in items.items():
            if value is None:
                held.pop(key, None)
            else:
                held[key] = value


class Part:
    """One workspace's share of a batch."""

    __slots__ = (
        "base", "meta", "latest", "created", "undo", "order", "entries", "objects", "last", "calls"
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
        self.objects: dict[str, dict[str, Any]] = {}
        self.last: StoreChange | None = None
        # (envelope, response) of each call answered from this workspace's
        # provisional state, to rewrite or run again (at a fresh reading)
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []

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
        ws.meta, ws.count, ws.latest = self.meta, self.base, self.latest
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
        # what listeners are told once the batch is written
        self.written: list[Record] = []
        # (workspace id, envelope) of the call being dispatched
        self.current: tuple[str, dict[str, Any]] | None = None


def run_batch(coord: Pipeline) -> Iterator[None]:
    """The body of `Coordinator.batch` (a generator for contextmanager).

    Calls see each other's effects at once and are answered provisionally.
    If the block raises, every call is undone and its response dict rewritten
    to an error. On exit each workspace's change is written. A workspace whose
    write conflicts with another writer is reloaded and its calls are run
    again, one by one (each at a fresh clock reading), their response dicts
    updated in place. A workspace whose write fails is undone, its calls'
    response dicts are rewritten in place to the error, and BatchWriteError
    is raised once the other workspaces are written.
    """
    if coord._batch is not None:
        yield  # nested: the outer batch writes
        return
    coord._batch = pending = Pending()
    try:
        yield
    except BaseException as exc:
        coord._batch = None
        abandoned = RpcError(
            INTERNAL_ERROR,
            "Internal error",
            {"detail": f"not applied: the batch was abandoned ({type(exc).__name__})"},
        )
        for wid, part in pending.parts.items():
            _undo(coord, wid, part)
            _answer_all(part, abandoned)
        raise
    coord._batch = None
    changes = [part.change(wid) for wid, part in pending.parts.items()]
    failed: dict[str, RpcError] = {}
    conflicted: list[str] = []
    for wid, error in apply_changes(coord.store, changes, coord._ids).items():
        part = pending.parts[wid]
        _undo(coord, wid, part)
        if error.code == STORE_CONFLICT:
            conflicted.append(wid)
        else:
            failed[wid] = error
            _answer_all(part, error)
    for wid, part in pending.parts.items():
        if wid not in failed and wid not in conflicted and wid in coord._workspaces:
            part.settle_into(coord._workspaces[wid])
    if coord._listeners.active:
        coord._listeners.notify(
            [r for r in pending.written if r[0] not in failed and r[0] not in conflicted]
        )
    for wid in conflicted:
        try:
            coord._reload(wid)
        except Exception:  # the re-runs conflict again and reload themselves
            log.exception("reloading workspace %s after a conflict failed", wid)
        for envelope, response in pending.parts[wid].calls:
            again = coord._dispatch_safe(envelope, retry=True)
            response.clear()
            response.update(again)
    if failed:
        raise BatchWriteError(next(iter(failed.values())))


def _undo(coord: Pipeline, wid: str, part: Part) -> None:
    if part.created:
        coord._workspaces.pop(wid, None)
    else:
        part.undo_into(coord._workspaces[wid])


def _answer_all(part: Part, error: RpcError) -> None:
    """Rewrite every response the part's calls were given to `error`."""
    for _, response in part.calls:
        response.pop("result", None)
        response["error"] = error.to_wire()
