"""What crosses the store boundary: changes, filters, the Store protocol
and the errors a store raises.

A store applies one `StoreChange` per write, atomically, under a
compare-and-swap on `base` (the number of audit entries the writer believes
the store holds). The audit log lives in the store; `read_entries` reads a
range of one workspace's log without loading the rest.

Errors (every one carries its data as attributes and says what to do in its
message)::

    StoreError                    a store refused or could not do what was asked
     ├── StoreConflictError       the log does not end at `base`     (workspace, held, base)
     │    └── WorkspaceExistsError  a create named a held workspace   (workspace, held)
     ├── WriteTurnTimeoutError    another writer held the workspace's write turn
     │                            past the store's wait          (workspace, wait)
     ├── MalformedChangeError     the change cannot be stored as given (workspace, problem)
     └── StoreUnavailableError    closed store, unreadable row, failed I/O (path)
          └── DatabaseEncodingError  a PostgreSQL database whose encoding cannot
                                     hold the log was not opened    (encoding)

Nothing was written whenever `apply` raises one of these.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import msgspec

__all__ = [
    "DEFAULT_WAIT",
    "DatabaseEncodingError",
    "EntryFilter",
    "EntryKeys",
    "HeldWorkspace",
    "MalformedChangeError",
    "Store",
    "StoreChange",
    "StoreConflictError",
    "StoreError",
    "StoreUnavailableError",
    "WorkspaceExistsError",
    "WriteTurnTimeoutError",
]

# Seconds a write waits for another writer's lock (a SQL store's `wait`).
DEFAULT_WAIT = 30.0


# An entry's filter keys, in `KEY_FIELDS` order (storage/match.py): its
# call's method, params.from and params.task_id where each is a string, else
# None, and "accepted" or "refused".
EntryKeys = tuple[str | None, str | None, str | None, str]


class StoreChange(msgspec.Struct, frozen=True):
    """One atomic write to one workspace.

    `entries` are audit entries in wire shape (dicts or Structs that encode
    to them), the first at seq `base`; `objects` maps collection -> key ->
    value, where `None` deletes the key; `meta` replaces the workspace's own
    fields (a dict, or a Struct that encodes to one); `replace` drops
    everything the store holds for the workspace first (and skips the `base`
    check); `create` refuses the change, with WorkspaceExistsError, when the
    store already holds the workspace, so two writers can never overwrite
    each other's new workspace. `entry_keys`, when the writer gives them, are
    each entry's `EntryKeys` as `storage.match.call_keys` derives them from
    the call it records: a store may file its filter index from them
    instead of reading the entries (MemoryStore does), so a writer that
    gives them vouches that they match.
    """

    id: str
    base: int
    version: int
    updated_at: str
    meta: dict[str, Any] | msgspec.Struct = {}
    entries: list[Any] = []
    objects: dict[str, dict[str, Any]] = {}
    replace: bool = False
    create: bool = False
    entry_keys: list[EntryKeys] | None = None


class HeldWorkspace(msgspec.Struct, frozen=True):
    """A workspace as a coordinator starts from it: its own fields, its entry
    count, and each object as the JSON text the store holds, undecoded (a
    coordinator decodes an object when a call first uses it)."""

    id: str
    meta: dict[str, Any]
    version: int
    updated_at: str
    objects: dict[str, dict[str, bytes]]


class EntryFilter(msgspec.Struct, frozen=True):
    """Which audit entries `read_entries` returns.

    Each field that is not `None` must match: `method`, `sender` (params.from)
    and `task_id` (params.task_id) are compared with the recorded call, whether
    it was accepted (`envelope`) or refused (`request`); `outcome` is
    "accepted" or "refused". Values are compared as given, so a filter on a
    non-string value matches only entries holding that exact value.
    """

    method: Any = None
    sender: Any = None
    task_id: Any = None
    outcome: str | None = None


class StoreError(Exception):
    """Base class of every error a store raises on purpose; nothing was written."""

    remedy: str = "Read the message: it names the workspace, the fault and what to do."


class StoreConflictError(StoreError):
    """The store's log for `workspace` does not end where the writer expected.

    `held` is the number of entries the store holds, `base` what the change
    assumed. Nothing was written.
    """

    remedy = "Reload the workspace from the store and apply the change again."

    def __init__(self, workspace: str, held: int, base: int, message: str | None = None) -> None:
        self.workspace = workspace
        self.held = held
        self.base = base
        super().__init__(
            message
            or f"workspace {workspace!r}: the store holds {held} audit entries but "
            f"this write assumed {base}, so nothing was written. Another writer "
            "changed this workspace since it was loaded; reload the workspace "
            "from the store and retry the call."
        )

    def __reduce__(self) -> tuple[Any, ...]:  # keep the attributes through pickling
        return (type(self), (self.workspace, self.held, self.base, str(self)))


class WorkspaceExistsError(StoreConflictError):
    """A change with `create` named a workspace the store already holds
    (with `held` entries). Nothing was written."""

    remedy = "Reload the workspace from the store, or create one with another id."

    def __init__(self, workspace: str, held: int, base: int = 0, message: str | None = None) -> None:
        super().__init__(
            workspace,
            held,
            base,
            message
            or f"workspace {workspace!r} already exists in the store ({held} audit "
            "entries), so this create wrote nothing. Another writer created it; "
            "reload the workspace from the store, or create one with another id.",
        )


class WriteTurnTimeoutError(StoreError):
    """Another writer held `workspace`'s write turn (its lock in the store)
    for longer than the store's `wait` (seconds), so this write did not get
    it; nothing was written."""

    remedy = (
        "Retry the call. If it keeps happening, a writer of the workspace is stopped or "
        "stuck while holding it: find it, or give the store a longer wait."
    )

    def __init__(self, workspace: str, wait: float, message: str | None = None) -> None:
        self.workspace = workspace
        self.wait = wait
        super().__init__(
            message
            or f"workspace {workspace!r}: another writer held its write turn for longer "
            f"than the {wait:g} s this store waits, so nothing was written. Retry; if it "
            "keeps happening, a writer of this workspace is stopped or stuck while "
            "holding it."
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.workspace, self.wait, str(self)))


class MalformedChangeError(StoreError):
    """A change the store cannot hold as given (bad version, non-object meta
    or entry, non-string key, a value JSON cannot encode). `problem` says
    which; nothing was written."""

    remedy = "Build the change as storage.types.StoreChange describes."

    def __init__(self, workspace: Any, problem: str, remedy: str) -> None:
        self.workspace = workspace
        self.problem = problem
        super().__init__(f"workspace {workspace!r}: {problem}; nothing was written. {remedy}")

    def __reduce__(self) -> tuple[Any, ...]:
        remedy = str(self).rsplit("nothing was written. ", 1)[-1]
        return (type(self), (self.workspace, self.problem, remedy))


class StoreUnavailableError(StoreError):
    """The store cannot serve the call: it is closed, or a row it holds
    cannot be read. `path` names the store's file (or "" in memory)."""

    remedy = "Open the store again, or repair or delete the row the message names."

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        super().__init__(message)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, str(self)))


class DatabaseEncodingError(StoreUnavailableError):
    """The database's `encoding` cannot hold every character a log may hold,
    so it was not opened; nothing was read or written."""

    remedy = "Use a database created with ENCODING 'UTF8' and copy the workspaces into it."

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        super().__init__(
            "",
            f"the PostgreSQL database's encoding is {encoding}, which cannot hold every "
            "character a call may carry (the log is UTF-8 text), so it was not opened and "
            "nothing was read or written. Use a database created as UTF8 (CREATE DATABASE "
            "name ENCODING 'UTF8' TEMPLATE template0, or a cluster made by initdb -E UTF8) "
            "and point the connection string at it; `chapline copy` moves workspaces there "
            "from another database.",
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.encoding,))


@runtime_checkable
class Store(Protocol):
    """What a coordinator needs from a store: the change API (SPECIFICATION.md,
    "Stores"). It names no collection: what a workspace holds is the
    coordinator's to say.

    A store that cannot batch writes subclasses `Store` to inherit
    `apply_many` (one `apply` per change).
    """

    def workspace_ids(self) -> list[str]:
        """The id of every workspace the store holds rows of, readable or
        not, in id order."""
        ...

    def load_held(self, workspace: str | None = None) -> list[HeldWorkspace]:
        """Every readable workspace (or only `workspace`) without its log, its
        objects as stored JSON text, unchecked; a workspace whose other rows
        cannot be read is skipped, with a warning (SPECIFICATION.md, "Stores")."""
        ...

    def read_entries(
        self,
        workspace: str,
        start: int = 0,
        stop: int | None = None,
        where: EntryFilter | None = None,
    ) -> list[dict[str, Any]]:
        """Entries with `start <= seq < stop` (and matching `where`), by seq."""
        ...

    def read_entry_texts(
        self, workspace: str, start: int = 0, stop: int | None = None
    ) -> list[bytes]:
        """The same range as JSON text, undecoded (chain verification hashes it)."""
        ...

    def apply(self, change: StoreChange) -> None:
        """Write `change` whole or not at all; raises a StoreError when not."""
        ...

    def apply_many(self, changes: Iterable[StoreChange]) -> list[Exception | None]:
        """Apply several changes, each all-or-nothing on its own; in each
        change's place the error that kept it out, or None if it was applied.

        This default applies them one by one; a store that can commit many
        at once (one disk sync) overrides it.
        """
        results: list[Exception | None] = []
        for change in changes:
            try:
                self.apply(change)
                results.append(None)
            except Exception as exc:  # each change stands alone: report it, go on
                results.append(exc)
        return results

    def write_turn(self, workspace: str) -> contextlib.AbstractContextManager[None]:
        """Hold `workspace`'s write turn for the `with` block: wait (at most
        the store's wait, else WriteTurnTimeoutError) until no other writer
        of it is writing, then keep every other writer of it out. Reads in
        the block see every commit before the turn; the block's first
        `apply` writes and commits inside it and ends the turn; a block that
        writes nothing ends it having written nothing. The same thread that
        took the turn makes the calls.

        This default takes no turn (for a store that cannot keep writers
        out): a write in the block may still raise StoreConflictError.
        """
        return _no_turn()

    def delete(self, workspace: str) -> None:
        """Forget a workspace (nothing happens if it is not held)."""
        ...

    def close(self) -> None:
        """Release the store; closing twice is harmless."""
        ...


@contextlib.contextmanager
def _no_turn() -> Iterator[None]:
    yield
