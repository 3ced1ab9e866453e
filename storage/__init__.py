"""Stores: where a coordinator's workspaces live between calls and restarts.

The public names only; see `storage.types` for the change, the protocol and
the error tree.
"""

from typing import Any

from storage.match import entry_matches
from storage.memory import MemoryStore
from storage.records import assemble_snapshot, change_from_record, object_key
from storage.sqlite import SqliteStore
from storage.types import (
    COLLECTIONS,
    EXTENSION_COLLECTIONS,
    IDEMPOTENCY_KEYS,
    SIGNED_CALLS,
    DatabaseEncodingError,
    EntryFilter,
    HeldWorkspace,
    MalformedChangeError,
    Store,
    StoreChange,
    StoreConflictError,
    StoreError,
    StoreUnavailableError,
    WorkspaceExistsError,
    WorkspaceRecord,
)

__all__ = [
    "COLLECTIONS",
    "DatabaseEncodingError",
    "EXTENSION_COLLECTIONS",
    "IDEMPOTENCY_KEYS",
    "SIGNED_CALLS",
    "EntryFilter",
    "HeldWorkspace",
    "MalformedChangeError",
    "MemoryStore",
    "PostgresStore",
    "SqliteStore",
    "Store",
    "StoreChange",
    "StoreConflictError",
    "StoreError",
    "StoreUnavailableError",
    "WorkspaceExistsError",
    "WorkspaceRecord",
    "assemble_snapshot",
    "change_from_record",
    "entry_matches",
    "object_key",
]


def __getattr__(name: str) -> Any:
    # PostgresStore imports psycopg: only when it is asked for.
    if name == "PostgresStore":
        from storage.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
