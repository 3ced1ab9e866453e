"""The unit of work of one call: what a handler reads and what it stages.

A handler reads the live workspace through its `Call` and stages new values
(immutable Structs) and deletions; nothing live changes until the store has
accepted the call's change, when the coordinator swaps the staged values in.
A handler that raises leaves nothing behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from msgspec.structs import replace

import msgspec

from coordinator.model import HistoryEntry, Member, Task, WorkspaceMeta, from_text
from coordinator.wire import INVALID_PARAMS, NOT_AUTHORISED, RpcError, missing
from storage import COLLECTIONS, IDEMPOTENCY_KEYS

if TYPE_CHECKING:
    from coordinator.coordinator import LogReader, Options

__all__ = ["Call", "Handler", "StoredObjectError", "Workspace", "COLLECTION_NAMES"]

COLLECTION_NAMES = (*COLLECTIONS, IDEMPOTENCY_KEYS)


class StoredObjectError(ValueError):
    """An object the store holds cannot be read as the coordinator's type."""


class Workspace:
    """One workspace as memory holds it: meta, objects, chain head and count.

    The log itself lives in the store. Objects loaded from the store stay as
    their stored JSON text until a call first uses them, so a workspace with
    many finished tasks costs little memory and starts fast.
    """

    __slots__ = ("meta", "objects", "count", "refusal_digests")

    def __init__(self, meta: WorkspaceMeta, count: int = 0) -> None:
        self.meta = meta
        self.objects: dict[str, dict[str, Any]] = {c: {} for c in COLLECTION_NAMES}
        self.count = count
        # digest of a signed refused request -> (seq, code); built on first need.
        self.refusal_digests: dict[str, tuple[int, int]] | None = None

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
                    f"workspace {self.id!r}: the stored {collection} object {key!r} "
                    f"cannot be read ({exc}); repair or delete its row in the store"
                ) from None
        return value

    def values(self, collection: str) -> list[Any]:
        """Every object of a collection, in held order."""
        return [self.get(collection, key) for key in list(self.objects[collection])]


_ABSENT = object()


class Call:
    """One dispatch in progress: the request, the time, and staged changes."""

    __slots__ = (
        "method",
        "params",
        "arrived",
        "ws",
        "created",
        "meta",
        "staged",
        "options",
        "_ids",
        "log",
    )

    def __init__(
        self,
        method: str,
        params: dict[str, Any],
        arrived: str,
        ws: Workspace | None,
        options: Options,
        new_id: Callable[[str], str],
        log: LogReader,
    ) -> None:
        self.method = method
        self.params = params
        self.arrived = arrived
        self.ws = ws
        self.created = False
        self.meta: WorkspaceMeta | None = None  # a new meta, when staged
        self.staged: dict[str, dict[str, Any]] = {}
        self.options = options
        self._ids = new_id
        self.log = log

    # -- reading ----------------------------------------------------------

    def require(self, name: str) -> Any:
        """A required param (present and not null), else -32602 Missing field."""
        value = self.params.get(name)
        if value is None:
            raise missing(name)
        return value

    def workspace(self) -> Workspace:
        """The workspace the call names, else -32602."""
        if self.ws is None:
            raise RpcError(INVALID_PARAMS, f"Unknown workspace: {self.params.get('workspace')}")
        return self.ws

    def get(self, collection: str, key: Any) -> Any:
        """An object as this call sees it: staged value first, then live."""
        staged = self.staged.get(collection)
        if staged is not None:
            value = staged.get(key, _ABSENT)
            if value is not _ABSENT:
                return value
        if self.ws is None:
            return None
        return self.ws.get(collection, key)

    def items(self, collection: str) -> list[tuple[str, Any]]:
        """Every object of a collection as this call sees it, in held order."""
        live = list(self.ws.objects[collection]) if self.ws is not None else []
        staged = self.staged.get(collection, {})
        out = [(k, self.get(collection, k)) for k in live]
        out = [(k, v) for k, v in out if v is not None]
        held = set(live)
        out.extend((k, v) for k, v in staged.items() if k not in held and v is not None)
        return out

    def member(self, uri: Any) -> Member | None:
        return self.get("members", uri) if isinstance(uri, str) else None

    def actor(self) -> Member:
        """The member named by `from`, else -32011."""
        sender = self.params.get("from")
        m = self.member(sender)
        if m is None:
            raise RpcError(NOT_AUTHORISED, f"Not a participant in this workspace: {sender}")
        return m

    def task(self, task_id: Any) -> Task:
        t = self.get("tasks", task_id) if isinstance(task_id, str) else None
        if t is None:
            raise RpcError(INVALID_PARAMS, f"Unknown task: {task_id}")
        return t

    def new_id(self, prefix: str, collection: str | None = None) -> str:
        """A generated id that names nothing held in `collection` (an id
        source restarted with the same seed would otherwise repeat ids)."""
        while True:
            candidate = self._ids(prefix)
            if collection is None or self.get(collection, candidate) is None:
                return candidate

    # -- staging ----------------------------------------------------------

    def advance(self, task: Task, state: str, note: Any = None, **changes: Any) -> Task:
        """`task` moved to `state`, with a history entry by the caller."""
        entry = HistoryEntry(ts=self.arrived, from_=self.params.get("from"), state=state, note=note)
        return replace(
            task, state=state, updated_at=self.arrived, history=[*task.history, entry], **changes
        )

    def put(self, collection: str, key: str, value: Any) -> None:
        self.staged.setdefault(collection, {})[key] = value

    def delete(self, collection: str, key: str) -> None:
        self.staged.setdefault(collection, {})[key] = None

    def set_meta(self, meta: WorkspaceMeta) -> None:
        self.meta = meta

    def create_workspace(self, meta: WorkspaceMeta) -> Workspace:
        """Stage a new workspace; it exists for others once the call commits."""
        self.ws = Workspace(meta)
        self.created = True
        self.meta = meta
        return self.ws


Handler = Callable[[Call], Any]
