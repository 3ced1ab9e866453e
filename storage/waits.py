"""Who is told when a writer waited for a workspace's write turn.

A writer that lost the compare-and-swap may queue for the workspace's turn
in the database (SPECIFICATION.md, "Observability"): whoever implements that
wait reports how long it took with `lock_waited(seconds)`, and a server
counts it (`coordinator.server.metrics`, `chapline_lock_wait_seconds`). With
no observer registered (a library, a test) the report costs one empty loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["lock_waited", "on_lock_wait"]

log = logging.getLogger(__name__)

_observers: list[Callable[[float], None]] = []


def on_lock_wait(observer: Callable[[float], None]) -> Callable[[], None]:
    """Tell `observer(seconds)` of every wait; returns what unregisters it."""
    _observers.append(observer)

    def remove() -> None:
        if observer in _observers:
            _observers.remove(observer)

    return remove


def lock_waited(seconds: float) -> None:
    """Report one wait for a write turn, `seconds` long. Never raises: an
    observer's failure must not fail the write that waited."""
    for observer in list(_observers):
        try:
            observer(seconds)
        except Exception:  # an observer never breaks the write that waited
            log.exception("a lock-wait observer failed; the write goes on")
