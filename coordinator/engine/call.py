"""The unit of work of one call: what it asked, what it reads, what it stages.

A handler reads the workspace only through its `Call` (which sees the call's
own staged values first) and stages new values (immutable Structs),
deletions, a new meta, or whole replacement collections; nothing live
changes until the store has accepted the call's change, when the pipeline
swaps the staged values in. A handler that raises leaves nothing behind.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol

from msgspec.structs import replace

from coordinator.engine.log import LogReader
from coordinator.engine.wire import INVALID_PARAMS, NOT_AUTHORISED, missing
from coordinator.engine.workspace import Workspace
from coordinator.errors import RpcError
from coordinator.model import HistoryEntry, Member, Task, WorkspaceMeta
from coordinator.options import Options

__all__ = ["Advertising", "Call"]

_ABSENT: Final = object()


class Advertising(Protocol):
    """What a handler may ask of the method registry (`registry.Registry`,
    which declares handlers and so sits above this module)."""

    def unadvertisable(self, profiles: Iterable[str]) -> str | None:
        """What is wrong with advertising `profiles`, or None."""
        ...


class Call:
    """One dispatch in progress.

    The request: `envelope` (the pipeline's own copy), `raw` (its canonical
    bytes, what the log hashes), `method`, `params`, `arrived` (the call's one
    clock reading), `retry` (whether a store conflict may re-run it) and
    `signed_bytes` (what a string `sig` signs, None without one; set before
    the sender checks run).
    The workspace: `held` as found (None if the call named none), `ws` the
    one it works on (a workspace it creates). What it stages: `staged`
    objects, a new `meta`, `created`. What it answers: `recorded` False for a
    write that answers without writing (a repeated idempotency key);
    `fresh_result` True when the result shares nothing with held values.
    """

    __slots__ = (
        "envelope",
        "raw",
        "method",
        "params",
        "arrived",
        "retry",
        "signed_bytes",
        "held",
        "ws",
        "created",
        "meta",
        "staged",
        "recorded",
        "fresh_result",
        "options",
        "registry",
        "log",
        "_ids",
    )

    def __init__(
        self,
        envelope: dict[str, Any],
        raw: bytes,
        method: str,
        params: dict[str, Any],
        arrived: str,
        retry: bool,
        ws: Workspace | None,
        options: Options,
        registry: Advertising,
        log: LogReader,
        new_id: Callable[[str], str],
    ) -> None:
        self.envelope = envelope
        self.raw = raw
        self.method = method
        self.params = params
        self.arrived = arrived
        self.retry = retry
        self.signed_bytes: bytes | None = None
        self.held = ws
        self.ws = ws
        self.created = False
        self.meta: WorkspaceMeta | None = None  # a new meta, when staged
        self.staged: dict[str, dict[str, Any]] = {}
        self.recorded = True
        self.fresh_result = False
        self.options = options
        self.registry = registry
        self.log = log
        self._ids = new_id

    @property
    def request_id(self) -> Any:
        return self.envelope.get("id")

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
            wid = self.params.get("workspace")
            if not isinstance(wid, str):
                raise RpcError(
                    INVALID_PARAMS,
                    f"params.workspace must be a workspace id (a string), got {reprlib.repr(wid)}",
                )
            raise RpcError(
                INVALID_PARAMS,
                f"Unknown workspace: {reprlib.repr(wid)}: no workspace has this id; check it, "
                "or create it with workspace.create",
            )
        return self.ws

    def get(self, collection: str, key: Any) -> Any:
        """An object as this call sees it: staged value first, then held."""
        staged = self.staged.get(collection)
        if staged is not None:
            try:
                value = staged.get(key, _ABSENT)
            except TypeError:  # an unhashable key names nothing
                return None
            if value is not _ABSENT:
                return value
        if self.ws is None:
            return None
        return self.ws.get(collection, key)

    def keys(self, collection: str) -> list[str]:
        """The keys of a collection as this call sees it, in held order."""
        held = list(self.ws.objects[collection]) if self.ws is not None else []
        staged = self.staged.get(collection)
        if not staged:
            return held
        seen = set(held)
        out = [k for k in held if staged.get(k, _ABSENT) is not None]
        out.extend(k for k, v in staged.items() if k not in seen and v is not None)
        return out

    def count(self, collection: str) -> int:
        """How many objects a collection holds, as this call sees it."""
        if not self.staged.get(collection):
            return len(self.ws.objects[collection]) if self.ws is not None else 0
        return len(self.keys(collection))

    def oldest(self, collection: str) -> str | None:
        """The first key of a collection as this call sees it (None if empty)."""
        staged = self.staged.get(collection, {})
        if self.ws is not None:
            for key in self.ws.objects[collection]:
                if staged.get(key, _ABSENT) is not None:
                    return key
        return next((k for k, v in staged.items() if v is not None), None)

    def items(self, collection: str) -> list[tuple[str, Any]]:
        """Every object of a collection as this call sees it, in held order."""
        return [(k, self.get(collection, k)) for k in self.keys(collection)]

    def member(self, uri: Any) -> Member | None:
        return self.get("members", uri) if isinstance(uri, str) else None

    def actor(self) -> Member:
        """The member named by `from`, else -32011."""
        sender = self.params.get("from")
        m = self.member(sender)
        if m is None:
            raise RpcError(
                NOT_AUTHORISED,
                f"Not a participant in this workspace: {reprlib.repr(sender)} (params.from); "
                "join first with participant.join, then send the call again",
            )
        return m

    def task(self, task_id: Any) -> Task:
        t: Task | None = self.get("tasks", task_id) if isinstance(task_id, str) else None
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
        """Stage `value` (not None) under `key`."""
        staged = self.staged.get(collection)
        if staged is None:
            staged = self.staged[collection] = {}
        staged[key] = value

    def delete(self, collection: str, key: str) -> None:
        """Stage the removal of `key` (nothing happens if it is not held)."""
        self.staged.setdefault(collection, {})[key] = None

    def replace_collection(self, collection: str, items: Mapping[str, Any]) -> None:
        """Stage `items` as the whole collection: every key the call sees and
        `items` lacks is deleted, every item put. Keys held before keep their
        place and new ones follow, as the store keeps them."""
        staged = self.staged.setdefault(collection, {})
        for key in self.keys(collection):
            if key not in items:
                staged[key] = None
        staged.update(items)

    def set_meta(self, meta: WorkspaceMeta) -> None:
        """Stage new workspace fields (the chain head is the pipeline's)."""
        self.meta = meta

    def create_workspace(self, meta: WorkspaceMeta) -> Workspace:
        """Stage a new workspace; it exists for others once the call commits
        (and the store refuses the write if another writer created it first)."""
        self.ws = Workspace(meta)
        self.created = True
        self.meta = meta
        return self.ws

    def answer_without_recording(self) -> None:
        """Answer this write's result without writing anything (nothing may
        be staged): a repeated request that changes nothing."""
        if self.staged or self.meta is not None or self.created:
            raise AssertionError("answer_without_recording() after staging a change")
        self.recorded = False

    def result_is_fresh(self) -> None:
        """The result shares no value with held objects, so the pipeline
        need not copy it for the caller."""
        self.fresh_result = True

    def unstage(self) -> None:
        """Drop everything staged (the call is refused), back to the held workspace."""
        self.ws = self.held
        self.created = False
        self.meta = None
        self.staged = {}
        self.recorded = True

