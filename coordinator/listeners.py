"""Audit listeners: told of each entry once it is durable."""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec

from coordinator.audit import AuditEntry

__all__ = ["AuditListener", "Listeners"]

log = logging.getLogger("chapline")

AuditListener = Callable[[str, AuditEntry], None]

_decode_entry = msgspec.json.Decoder(AuditEntry).decode
_encode_sorted = msgspec.json.Encoder(order="sorted").encode


class Listeners:
    """The listeners of one coordinator; a raising listener never breaks a call."""

    def __init__(self) -> None:
        self._listeners: list[AuditListener] = []

    def add(self, listener: AuditListener) -> None:
        self._listeners.append(listener)

    def notify(self, entries: list[tuple[str, AuditEntry]]) -> None:
        """Tell every listener of each (workspace id, entry), in order."""
        if not self._listeners:
            return
        for workspace_id, entry in entries:
            text = _encode_sorted(entry)
            for listener in self._listeners:
                try:
                    # Its own copy: the envelope's values are shared with held
                    # objects, and one listener must not change what another sees.
                    listener(workspace_id, _decode_entry(text))
                except Exception:
                    log.exception("audit listener %r raised; the call is unaffected", listener)
