"""One workspace as memory holds it between calls."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, cast

import msgspec

from coordinator.engine.clock import epoch_ms, iso_ms
from coordinator.engine.wire import STORED_OBJECT_UNREADABLE
from coordinator.errors import StoredObjectError
from coordinator.model import COLLECTION_NAMES, WorkspaceMeta, from_text
from storage import HeldWorkspace

__all__ = ["CollectionIndex", "Workspace", "workspace_from_held"]

log = logging.getLogger("chapline")


class CollectionIndex(Protocol):
    """Something derived from one collection's objects and kept beside them."""

    def update(self, key: str, value: Any) -> None:
        """The collection's `key` now holds `value` (None: nothing)."""


_I = TypeVar("_I", bound=CollectionIndex)


class Workspace:
    """One workspace as memory holds it: meta, objects, chain head and count.

    The log itself lives in the store. Objects loaded from the store stay as
    their stored JSON text until a call first uses them, so a workspace with
    many finished tasks costs little memory and starts fast. Handlers read
    objects through their `Call`, which sees its own staged values first.
    """

    __slots__ = ("meta", "objects", "count", "latest", "refusal_digests", "indexes")

    def __init__(self, meta: WorkspaceMeta, count: int = 0, latest: str = "") -> None:
        self.meta = meta
        self.objects: dict[str, dict[str, Any]] = {c: {} for c in COLLECTION_NAMES}
        self.count = count
        # The arrival time of the workspace's last write (`iso_ms` text, "" if
        # none): no later call is stamped earlier (SPECIFICATION.md, "Dispatch").
        self.latest = latest
        # digest of a signed call on the log -> (seq, refusal code or None);
        # built on first need (see signed_calls.py).
        self.refusal_digests: dict[str, tuple[int, int | None]] | None = None
        # collection -> an index of its objects, built on first need (`index`)
        # and told every value the collection takes (`put`).
        self.indexes: dict[str, CollectionIndex] = {}

    @property
    def id(self) -> str:
        return self.meta.id

    def get(self, collection: str, key: Any) -> Any:
        """A held object, decoded from its stored text on first use."""
        held = self.objects[collection]
        try:
            value = held.get(key)
        except TypeError:  # an unhashable key names nothing
            return None
        if type(value) is bytes:
            try:
                value = held[key] = from_text(collection, value)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise StoredObjectError(
                    STORED_OBJECT_UNREADABLE, self.id, collection, key, str(exc)
                ) from None
        return value

    def values(self, collection: str) -> list[Any]:
        """Every object of a collection, in held order."""
        return [self.get(collection, key) for key in list(self.objects[collection])]

    def put(self, collection: str, key: str, value: Any) -> None:
        """Hold `value` as the collection's `key` (None: remove it); only once
        the store has it (write-ahead), or as a batch's provisional value."""
        held = self.objects[collection]
        if value is None:
            held.pop(key, None)
        else:
            held[key] = value
        index = self.indexes.get(collection)
        if index is not None:
            index.update(key, None if value is None else self.get(collection, key))

    def put_values(self, values: dict[str, dict[str, Any]]) -> None:
        """`put` each value given, `{collection: {key: value or None}}`."""
        for collection, items in values.items():
            if collection in self.indexes:
                for key, value in items.items():
                    self.put(collection, key, value)
                continue
            held = self.objects[collection]  # the common case, without a call per key
            for key, value in items.items():
                if value is None:
                    held.pop(key, None)
                else:
                    held[key] = value

    def index(self, collection: str, build: Callable[[Iterable[tuple[str, Any]]], _I]) -> _I:
        """The collection's index, built by `build((key, object), ...)` from the
        held objects on first need, then kept up to date by `put`. It never
        sees what a call has staged: the caller lays that over it."""
        index = self.indexes.get(collection)
        if index is None:
            index = self.indexes[collection] = build(
                (key, self.get(collection, key)) for key in list(self.objects[collection])
            )
        return cast(_I, index)  # one collection, one kind of index: the one `build` makes


def workspace_from_held(held: HeldWorkspace) -> Workspace | None:
    """Memory's form of a stored workspace; None (with a warning) if its own
    fields cannot be read. Objects are checked when first used."""
    try:
        meta = msgspec.convert({"id": held.id, **held.meta}, WorkspaceMeta)
    except msgspec.ValidationError as exc:
        log.warning("workspace %s skipped: its stored fields cannot be read (%s)", held.id, exc)
        return None
    ws = Workspace(meta, held.version, _stamp(held.updated_at))
    for collection, items in held.objects.items():
        if collection in ws.objects:
            ws.objects[collection] = items
    return ws


def _stamp(held: str) -> str:
    """A store's `updated_at` as `iso_ms` writes it, or "" when it is no time
    (a store written by other software may hold another ISO 8601 form)."""
    try:
        return iso_ms(epoch_ms(held))
    except (ValueError, OverflowError, OSError):
        return ""
