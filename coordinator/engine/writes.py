"""Writing to the store: one workspace's change, built entry by entry
(`WorkspaceWrite`), and the JSON-RPC error a refused write is answered with."""

from __future__ import annotations

import logging
from typing import Any

import msgspec
from msgspec import Raw
from msgspec.structs import replace

from coordinator.audit import AuditEntry
from coordinator.engine.canonical import ZERO_HASH, link_hash
from coordinator.engine.ids import IdSource
from coordinator.engine.incidents import logged
from coordinator.engine.wire import STORE_CONFLICT, STORE_WRITE_FAILED
from coordinator.engine.workspace import Workspace
from coordinator.errors import RpcError
from coordinator.model import WorkspaceMeta
from storage import Store, StoreChange, StoreConflictError, WriteTurnTimeoutError
from storage.match import call_keys
from storage.types import EntryKeys

__all__ = ["WorkspaceWrite", "apply_changes", "store_error"]

log = logging.getLogger("chapline")

_encode_sorted = msgspec.json.Encoder(order="sorted").encode


class WorkspaceWrite:
    """One change to one workspace on its way to the store: the entries it
    appends, the objects it puts (`{collection: {key: value or None}}`, None
    deleting), the fields it leaves (`meta`, the chain head included), the
    time it is stamped with (`arrived`: the last entry's) and whether it
    creates the workspace. Every entry a log gets is built here, linked into
    the chain as it is added (SPECIFICATION.md, "Audit entries and the
    chain"); `engine.held.HeldWorkspaces.append` writes it."""

    __slots__ = ("ws", "meta", "objects", "arrived", "created", "entries", "keys", "calls")

    def __init__(
        self,
        ws: Workspace,
        meta: WorkspaceMeta,
        objects: dict[str, dict[str, Any]],
        arrived: str,
        created: bool = False,
    ) -> None:
        self.ws = ws
        self.meta = meta
        self.objects = objects
        self.arrived = arrived
        self.created = created
        self.entries: list[AuditEntry] = []
        # each entry's filter keys, read from the call it records: a store
        # files them without decoding the entry (StoreChange.entry_keys)
        self.keys: list[EntryKeys] = []
        # the call each entry records, as a dict (for the signed-call index)
        self.calls: list[dict[str, Any]] = []

    def add_entry(
        self,
        arrived: str,
        call: dict[str, Any],
        canonical: bytes,
        outcome: dict[str, Any] | None = None,
        recorded: Any = None,
    ) -> None:
        """Append the entry recording `call`, whose JCS bytes are `canonical`,
        at `arrived`: accepted, or refused with `outcome`. The entry holds
        `recorded` as the call; by default `canonical` itself, written as it
        is instead of being encoded a second time."""
        if outcome is None:
            record = canonical
        else:  # JCS of {"outcome", "request"}: keys in order, request already canonical
            record = b'{"outcome":' + _encode_sorted(outcome) + b',"request":' + canonical + b"}"
        prev = None
        meta = self.meta
        if meta.chain_enabled:
            prev = meta.chain_head or ZERO_HASH
            self.meta = replace(meta, chain_head=link_hash(record, prev))
        if recorded is None:
            recorded = Raw(canonical)
        seq = self.ws.count + len(self.entries)
        if outcome is None:
            entry = AuditEntry(seq, arrived, envelope=recorded, prev_hash=prev)
        else:
            entry = AuditEntry(seq, arrived, request=recorded, outcome=outcome, prev_hash=prev)
        self.entries.append(entry)
        self.keys.append(call_keys(call, outcome is not None))
        self.calls.append(call)
        self.arrived = arrived

    def change(self) -> StoreChange:
        """The store change that writes all of it, on the entries held now."""
        ws = self.ws
        return StoreChange(
            id=ws.id,
            base=ws.count,
            version=ws.count + len(self.entries),
            updated_at=self.arrived,
            meta=self.meta,
            entries=self.entries,
            objects=self.objects,
            create=self.created,
            entry_keys=self.keys,
        )


def apply_changes(store: Store, changes: list[StoreChange]) -> dict[str, Exception]:
    """Write several changes (one per workspace), with one commit where the
    store batches; what the store raised for each workspace not written, by
    id (`store_error` says how to answer it)."""
    if len(changes) == 1:
        try:
            store.apply(changes[0])
        except Exception as exc:
            return {changes[0].id: exc}
        return {}
    try:
        results = store.apply_many(changes)
    except Exception as exc:  # the commit itself failed: nothing was written
        results = [exc] * len(changes)
    return {
        change.id: exc for change, exc in zip(changes, results, strict=True) if exc is not None
    }


def store_error(workspace_id: str, exc: Exception, ids: IdSource) -> RpcError:
    """The answer to a call whose write the store refused: -32901 for a
    conflict or a write turn not had within the store's wait (retry), else
    -32900 with the cause logged under a log id (the store's own words can
    name files, hosts or credentials)."""
    if isinstance(exc, WriteTurnTimeoutError):
        return RpcError(
            STORE_CONFLICT,
            f"Workspace {workspace_id} stayed busy: another writer held its write turn "
            f"past the store's {exc.wait:g} s deadline, so the call was not run and nothing "
            "was recorded. Retry the call; if this keeps happening, a writer of this "
            "workspace is stopped or stuck (tell the operator).",
            {"workspace": workspace_id, "deadline": exc.wait},
        )
    if isinstance(exc, StoreConflictError):
        return RpcError(
            STORE_CONFLICT,
            f"Another writer changed workspace {exc.workspace} and the call could not be "
            "applied on the fresh state; nothing was recorded. Retry the call.",
            {"workspace": exc.workspace, "held": exc.held, "base": exc.base},
        )
    log_id = logged(log, f"store write failed for workspace {workspace_id}", exc, ids)
    return RpcError(
        STORE_WRITE_FAILED,
        f"The store did not accept the write for workspace {workspace_id}, so the call "
        f"was not applied; retry the call. The server logged the cause as {log_id} "
        "(quote it to the operator if the retry fails too).",
        {"workspace": workspace_id, "log_id": log_id},
    )
