"""The workspaces a coordinator holds in memory, and the one way they change.

`HeldWorkspaces` is the state the pipeline shares with its collaborators
(the batch, the sweeps, the compatibility views, the projections): the held
workspaces by id, which of them other writers have changed since (reloaded
before their next use), the batch in progress, what is durable, and the
listeners. Every change to a held workspace, a call's or a sweep's, goes
through `append`, in the order SPECIFICATION.md, "Write-ahead persistence"
gives: the store (or the batch) first, then memory, then the listeners.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from coordinator.audit import AuditEntry
from coordinator.engine.batch import BatchPart, WorkspaceBatch
from coordinator.engine.ids import IdSource
from coordinator.engine.log import LogReader
from coordinator.engine.signed_calls import index_signed
from coordinator.engine.wire import INTERNAL_ERROR
from coordinator.engine.workspace import Workspace, workspace_from_held
from coordinator.engine.writes import WorkspaceWrite, apply_changes, store_error
from coordinator.errors import BatchWriteError, RpcError
from coordinator.listeners import Listeners, decode_objects, encode_objects
from storage import Store, StoreConflictError

__all__ = ["HeldWorkspaces"]

log = logging.getLogger("chapline")


class HeldWorkspaces:
    """The workspaces one coordinator holds, over its `store`.

    `get` reads the held copy as it is; `find` first reloads one another
    writer changed (or put in the store since). `batch` is the batch in
    progress (None outside one). `listeners` are told of every durable
    entry, after `append` (or the batch) wrote it.
    """

    def __init__(self, store: Store, listeners: Listeners) -> None:
        self.store = store
        self.listeners = listeners
        self.batch: WorkspaceBatch | None = None
        self._held: dict[str, Workspace] = {}
        # Workspaces other processes changed since we loaded them (a store
        # with `changed()` tells): reloaded before their next use, so our
        # writes start from the fresh state instead of being refused.
        self._changed: Callable[[], set[str] | None] | None = getattr(store, "changed", None)
        self._stale: set[str] = set()

    def load_all(self) -> None:
        """Hold every workspace the store holds (a coordinator's start)."""
        # Objects stay as stored text until used: a fresh collection is young
        # garbage the collector would otherwise scan again and again.
        collecting = gc.isenabled()
        gc.disable()
        try:
            for held in self.store.load_held():
                ws = workspace_from_held(held)
                if ws is not None:
                    self._held[ws.id] = ws
        finally:
            if collecting:
                gc.enable()

    # -- reading --------------------------------------------------------------

    def __contains__(self, workspace_id: object) -> bool:
        return workspace_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    def ids(self) -> list[str]:
        """The held workspaces' ids, in the order they were first held."""
        return list(self._held)

    def get(self, workspace_id: str) -> Workspace | None:
        """The held workspace as memory has it, or None."""
        return self._held.get(workspace_id)

    def find(self, workspace_id: str) -> Workspace | None:
        """The workspace held in memory, or one another writer has since put in
        the store (so coordinators sharing a store see each other's); reloaded
        first if another writer changed it. Not inside a batch that wrote to it:
        the batch's provisional state is the one its calls see."""
        ws = self._held.get(workspace_id)
        if (ws is None or workspace_id in self._stale) and (
            self.batch is None or workspace_id not in self.batch.parts
        ):
            if self.reload(workspace_id):
                ws = self._held.get(workspace_id)
            self._stale.discard(workspace_id)
        return ws

    def note_changes(self) -> None:
        """Mark the held workspaces the store says others changed since it was
        last asked (all of them when it cannot say); nothing if it cannot tell."""
        changed = self._changed
        if changed is None:
            return
        try:
            ids = changed()
        except Exception:  # a hint only: the CAS still guards every write
            log.exception("the store could not tell which workspaces changed")
            ids = None
        if ids is None:
            self._stale.update(self._held)
        elif ids:
            self._stale.update(wid for wid in ids if wid in self._held)

    def reload(self, workspace_id: str) -> bool:
        """Replace memory's copy of one workspace with the store's (dropping it
        if the store has none); False if the store's cannot be read."""
        self._stale.discard(workspace_id)  # what follows is the store's latest
        for held in self.store.load_held(workspace_id):
            ws = workspace_from_held(held)
            if ws is None:
                return False
            self._held[workspace_id] = ws
            return True
        self._held.pop(workspace_id, None)
        return True

    def log_reader(self, ws: Workspace | None) -> LogReader:
        """The workspace's log as a call sees it: the store's, then what the
        batch in progress has accepted and not written."""
        unwritten: list[AuditEntry] = []
        if ws is not None and self.batch is not None:
            unwritten = self.batch.unwritten(ws.id)
        return LogReader(self.store, ws, unwritten)

    # -- what is durable (what projections read) --------------------------------

    def durable_counts(self) -> dict[str, int]:
        """Entries held per workspace, in id order (outside a batch all are durable)."""
        return {wid: self._held[wid].count for wid in sorted(self._held)}

    def durable_entries(self, workspace_id: str, start: int, stop: int) -> list[AuditEntry]:
        """Entries `start <= seq < stop` of the workspace, from the store."""
        return [
            msgspec.convert(e, AuditEntry)
            for e in self.store.read_entries(workspace_id, start, stop)
        ]

    def current_objects(self, workspace_id: str) -> dict[str, dict[str, Any]]:
        """Every object the workspace holds, as a private copy."""
        ws = self._held[workspace_id]
        held = {c: {k: ws.get(c, k) for k in list(items)} for c, items in ws.objects.items()}
        return decode_objects(encode_objects(held))

    # -- changing -------------------------------------------------------------

    def append(self, write: WorkspaceWrite, answer: dict[str, Any]) -> Exception | None:
        """Write `write` to the store (in a batch: add it to the batch), then
        hold what it changed and tell the listeners its entries, with
        `answer` (the response of the call it records; `{}` for none).

        Returns what the store raised when it refused the write, with memory
        as it was; None once it is written."""
        ws = write.ws
        batch = self.batch
        if batch is None:
            try:
                self.store.apply(write.change())
            except Exception as refused:
                return refused
        else:
            batch.add(write, answer)
        ws.put_values(write.objects)
        ws.meta = write.meta
        ws.count += len(write.entries)
        ws.latest = max(ws.latest, write.arrived)
        if write.created:
            self._held[ws.id] = ws
        for at, entry in enumerate(write.entries):
            index_signed(ws, write.calls[at], entry)
        if batch is None and self.listeners.active:
            self.listeners.notify([(ws.id, e, write.objects, answer) for e in write.entries])
        return None

    def run_batch(
        self, ids: IdSource, run_again: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> Iterator[None]:
        """The body of `Coordinator.batch` (a generator for contextmanager).

        Calls see each other's effects at once and are answered provisionally.
        If the block raises, every call is undone and its response dict
        rewritten to an error. On exit each workspace's change is written. A
        workspace whose write conflicts with another writer is reloaded and
        its calls are `run_again`, one by one (each at a fresh clock reading),
        their response dicts updated in place. A workspace whose write fails
        is undone, its calls' response dicts are rewritten in place to the
        error, and BatchWriteError is raised once the other workspaces are
        written. `ids` names the log entries of store failures.
        """
        if self.batch is not None:
            yield  # nested: the outer batch writes
            return
        # What other writers changed, asked once for the batch's calls: a
        # hint, as for one call (the CAS guards each write, and a conflict
        # runs the workspace's calls again).
        self.note_changes()
        self.batch = batch = WorkspaceBatch()
        try:
            yield
        except BaseException as exc:
            self.batch = None
            abandoned = RpcError(
                INTERNAL_ERROR,
                "Internal error",
                {"detail": f"not applied: the batch was abandoned ({type(exc).__name__})"},
            )
            for wid, part in batch.parts.items():
                self._undo(wid, part)
                part.answer_all(abandoned)
            raise
        self.batch = None
        changes = [part.change(wid) for wid, part in batch.parts.items()]
        failed: dict[str, RpcError] = {}
        conflicted: list[str] = []
        for wid, refused in apply_changes(self.store, changes).items():
            part = batch.parts[wid]
            self._undo(wid, part)
            if isinstance(refused, StoreConflictError):
                conflicted.append(wid)  # each call runs again, in the turn if it loses again
            else:  # a turn not had within the wait among them: waiting again per call would not help
                failed[wid] = error = store_error(wid, refused, ids)
                part.answer_all(error)
        for wid, part in batch.parts.items():
            if wid not in failed and wid not in conflicted and wid in self._held:
                part.settle_into(self._held[wid])
        if self.listeners.active:
            self.listeners.notify(
                [r for r in batch.written if r[0] not in failed and r[0] not in conflicted]
            )
        for wid in conflicted:
            try:
                self.reload(wid)
            except Exception:  # the re-runs conflict again and reload themselves
                log.exception("reloading workspace %s after a conflict failed", wid)
            for envelope, response in batch.parts[wid].calls:
                again = run_again(envelope)
                response.clear()
                response.update(again)
        if failed:
            raise BatchWriteError(next(iter(failed.values())))

    def _undo(self, workspace_id: str, part: BatchPart) -> None:
        if part.created:
            self._held.pop(workspace_id, None)
        else:
            part.undo_into(self._held[workspace_id])
