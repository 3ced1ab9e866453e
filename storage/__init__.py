"""Stores: where a coordinator's workspaces live between calls and restarts.

The public names only; see `storage.types` for the change, the protocol and
the error tree.
"""

from typing import Any

from storage.match import entry_matches
from storage.memory import MemoryStore
from storage.records import WorkspaceRecord
from storage.sqlite import SqliteStore
from storage.types import (
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
    WriteTurnTimeoutError,
)

__all__ = [
    "DatabaseEncodingError",
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
    "WriteTurnTimeoutError",
    "entry_matches",
]


def __getattr__(name: str) -> Any:
    # PostgresStore imports psycopg (chapline[postgres]): only when it is asked for.
    if name == "PostgresStore":
        from storage.postgres import PostgresStore

        return PostgresStore
    raise AttributeError(f"module 'storage' has no attribute {name!r}")
