"""The method handlers of every profile chapline implements, by method name."""

from __future__ import annotations

from coordinator.call import Handler
from coordinator.profiles import core, review

__all__ = ["HANDLERS"]

HANDLERS: dict[str, Handler] = {**core.HANDLERS, **review.HANDLERS}
