"""Writing to the store, and the JSON-RPC error a refused write is answered with."""

from __future__ import annotations

import logging

from coordinator.engine.ids import IdSource
from coordinator.engine.incidents import logged
from coordinator.engine.wire import STORE_CONFLICT, STORE_WRITE_FAILED
from coordinator.errors import RpcError
from storage import Store, StoreChange, StoreConflictError

__all__ = ["apply_change", "apply_changes", "store_error"]

log = logging.getLogger("chapline")


def apply_change(store: Store, change: StoreChange, ids: IdSource) -> RpcError | None:
    """Write one change; the error to answer with if the store refused it."""
    try:
        store.apply(change)
    except Exception as exc:
        return store_error(change.id, exc, ids)
    return None


def apply_changes(store: Store, changes: list[StoreChange], ids: IdSource) -> dict[str, RpcError]:
    """Write several changes (one per workspace), with one commit where the
    store batches; the error of each workspace not written, by id."""
    if len(changes) == 1:
        error = apply_change(store, changes[0], ids)
        return {} if error is None else {changes[0].id: error}
    try:
        results = store.apply_many(changes)
    except Exception as exc:  # the commit itself failed: nothing was written
        results = [exc] * len(changes)
    return {
        change.id: store_error(change.id, exc, ids)
        for change, exc in zip(changes, results, strict=True)
        if exc is not None
    }


def store_error(workspace_id: str, exc: Exception, ids: IdSource) -> RpcError:
    """The answer to a call whose write the store refused: -32901 for a
    conflict (retry), else -32900 with the cause logged under a log id (the
    store's own words can name files, hosts or credentials)."""
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
