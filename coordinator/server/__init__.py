"""Transports: ways to reach a Coordinator from outside the process.

HTTP, the desk, MCP and A2A need extras (`chapline[server]`, `[mcp]`,
`[a2a]`); each name here is imported when first used, so the modules that
need none (auth's token table, the worker processes) load without them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.errors import DispatcherClosed
    from coordinator.server.dispatcher import Dispatcher, SerialDispatcher
    from coordinator.server.http import MAX_BODY_BYTES, create_app
    from coordinator.server.observed import Observability

__all__ = [
    "MAX_BODY_BYTES",
    "Dispatcher",
    "DispatcherClosed",
    "Observability",
    "SerialDispatcher",
    "create_app",
]

# name -> the module that defines it
_HOMES = {
    "MAX_BODY_BYTES": "coordinator.server.http",
    "Dispatcher": "coordinator.server.dispatcher",
    "DispatcherClosed": "coordinator.errors",
    "Observability": "coordinator.server.observed",
    "SerialDispatcher": "coordinator.server.dispatcher",
    "create_app": "coordinator.server.http",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'coordinator.server' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
