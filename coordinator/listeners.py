"""Who hears about recorded calls, and what they are told.

Three kinds of consumer, all told after the call's store write, in log order,
never for reads, idempotent replays or refusals that were not recorded:

- audit listeners, `fn(workspace_id, entry)`, as 0.3.3 calls them;
- change listeners, `fn(change)`, told what the call changed (`Change`);
- projections (`coordinator.projections`), fed changes in order, with a
  durable cursor.

A consumer that raises is reported once on the `chapline` logger, with its
traceback, and then only when it recovers or fails differently: one line per
failure, not one traceback per entry. It never affects the call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec

from coordinator.audit import AuditEntry
from coordinator.model import COLLECTION_TYPES

__all__ = [
    "AttachedProjection",
    "AuditListener",
    "Change",
    "ChangeListener",
    "ListenerHandle",
    "Listeners",
    "RecordedCall",
]

log = logging.getLogger("chapline")

AuditListener = Callable[[str, AuditEntry], None]


class Change(msgspec.Struct, frozen=True):
    """What one recorded call changed, as change listeners and projections
    see it. Every value is the consumer's own copy (objects are frozen
    Structs or JSON values), so nothing it does reaches the coordinator.

    - `entry`: the audit entry (its `seq` orders and deduplicates).
    - `objects`: what the call wrote, `{collection: {key: value}}`, `None`
      for a deletion. `None` when replayed from the log (catch-up), where the
      objects each call wrote are not kept.
    - `current`: on the last change of a workspace's catch-up only, every
      object the workspace holds now (so a projection that keeps objects
      ends where a live one would); otherwise `None`.
    - `result` / `error`: the call's answer (`error` for a recorded
      refusal); both `None` when replayed from the log.
    """

    workspace: str
    entry: AuditEntry
    objects: dict[str, dict[str, Any]] | None = None
    current: dict[str, dict[str, Any]] | None = None
    result: Any = None
    error: dict[str, Any] | None = None

    @property
    def replayed(self) -> bool:
        """Whether this change was read back from the log (catch-up)."""
        return self.objects is None


ChangeListener = Callable[[Change], None]


class AttachedProjection(Protocol):
    """A projection attached to the coordinator, as `Listeners` feeds it
    (`projections.cursor.Attachment`)."""

    def feed(self, changes: list[Change]) -> None: ...

    def detach(self) -> None: ...

# (workspace id, entry, the objects the call staged, its response)
RecordedCall = tuple[str, AuditEntry, dict[str, dict[str, Any]], dict[str, Any]]

_OBJECT_DECODERS = {
    c: msgspec.json.Decoder(dict[str, t | None])  # type: ignore[valid-type]
    for c, t in COLLECTION_TYPES.items()
}
_encode = msgspec.json.Encoder(order="sorted").encode
_encode_ordered = msgspec.json.Encoder().encode  # results keep their key order
_decode = msgspec.json.decode
_decode_entry = msgspec.json.Decoder(AuditEntry).decode


def decode_objects(texts: dict[str, bytes]) -> dict[str, dict[str, Any]]:
    """Objects from their encoded form, each collection's as its type in
    `model.COLLECTION_TYPES` (frozen Structs)."""
    out: dict[str, dict[str, Any]] = {}
    for collection, text in texts.items():
        decoder = _OBJECT_DECODERS.get(collection)
        out[collection] = decoder.decode(text) if decoder is not None else _decode(text)
    return out


def encode_objects(objects: dict[str, dict[str, Any]]) -> dict[str, bytes]:
    return {collection: _encode(items) for collection, items in objects.items()}


class _Guard:
    """Calls one consumer; reports a failure once, and its recovery."""

    __slots__ = ("consumer", "what", "failing", "failures")

    def __init__(self, consumer: Any, what: str) -> None:
        self.consumer = consumer
        self.what = what
        self.failing: str | None = None
        self.failures = 0

    def failed(self, exc: Exception) -> None:
        self.failures += 1
        problem = f"{type(exc).__name__}: {exc}"
        if problem != self.failing:
            log.error(
                "%s %r raised %s; the call is unaffected (reported once until it "
                "succeeds again or fails differently)",
                self.what,
                self.consumer,
                problem,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
            self.failing = problem

    def succeeded(self) -> None:
        if self.failing is not None:
            log.warning(
                "%s %r works again after %d failures", self.what, self.consumer, self.failures
            )
            self.failing = None
            self.failures = 0


class ListenerHandle:
    """The handle `add_audit_listener`, `add_change_listener` return."""

    __slots__ = ("_owner", "_guard")

    def __init__(self, owner: Listeners, guard: _Guard) -> None:
        self._owner = owner
        self._guard = guard

    def detach(self) -> None:
        """Stop telling this consumer; calling it again does nothing."""
        self._owner._remove(self._guard)  # noqa: SLF001 (its owner, in this module)

    @property
    def attached(self) -> bool:
        return self._owner._has(self._guard)  # noqa: SLF001 (its owner, in this module)


class Listeners:
    """Every consumer of one coordinator. `active` is False when there is
    none, so that a coordinator with no consumer pays one attribute test per
    call and builds nothing for listeners."""

    def __init__(self) -> None:
        self._audit: list[_Guard] = []
        self._change: list[_Guard] = []
        self._attachments: list[AttachedProjection] = []
        self.active = False

    def _changed(self) -> None:
        self.active = bool(self._audit or self._change or self._attachments)

    def add_audit(self, listener: AuditListener) -> ListenerHandle:
        guard = _Guard(listener, "audit listener")
        self._audit.append(guard)
        self._changed()
        return ListenerHandle(self, guard)

    def add_change(self, listener: ChangeListener) -> ListenerHandle:
        guard = _Guard(listener, "change listener")
        self._change.append(guard)
        self._changed()
        return ListenerHandle(self, guard)

    def add_attachment(self, attachment: AttachedProjection) -> None:
        self._attachments.append(attachment)
        self._changed()

    def attachments(self) -> list[AttachedProjection]:
        return list(self._attachments)

    def remove_attachment(self, attachment: AttachedProjection) -> None:
        if attachment in self._attachments:
            self._attachments.remove(attachment)
        self._changed()

    def _remove(self, guard: _Guard) -> None:
        for group in (self._audit, self._change):
            if guard in group:
                group.remove(guard)
        self._changed()

    def _has(self, guard: _Guard) -> bool:
        return guard in self._audit or guard in self._change

    def notify(self, records: list[RecordedCall]) -> None:
        """Tell every consumer about these durable entries, in order."""
        if not records:
            return
        wants_changes = bool(self._change or self._attachments)
        encoded: list[tuple[str, bytes, dict[str, bytes], bytes]] = []
        for workspace_id, entry, staged, response in records:
            text = _encode(entry)
            for guard in list(self._audit):
                try:
                    # Its own copy: the envelope's values are shared with held
                    # objects, and one listener must not change what another sees.
                    guard.consumer(workspace_id, _decode_entry(text))
                except Exception as exc:
                    guard.failed(exc)
                else:
                    guard.succeeded()
            if not wants_changes:
                continue
            objects = encode_objects(staged)
            answer = _encode_ordered(response)
            for guard in list(self._change):
                try:
                    guard.consumer(_change(workspace_id, text, objects, answer))
                except Exception as exc:
                    guard.failed(exc)
                else:
                    guard.succeeded()
            encoded.append((workspace_id, text, objects, answer))
        for attachment in list(self._attachments):
            attachment.feed([_change(*parts) for parts in encoded])


def _change(workspace_id: str, entry: bytes, objects: dict[str, bytes], response: bytes) -> Change:
    answer = _decode(response)
    return Change(
        workspace=workspace_id,
        entry=_decode_entry(entry),
        objects=decode_objects(objects),
        result=answer.get("result"),
        error=answer.get("error"),
    )
