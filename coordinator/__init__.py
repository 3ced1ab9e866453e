"""chapline: a write-ahead CHAP coordinator.

The public API. Each name is imported when first used, so `import coordinator`
loads nothing heavy, and nothing from an extra until a name that needs it is
used (`sign_envelope` needs `chapline[crypto]`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.audit import AuditEntry
    from coordinator.client import (
        AsyncRemoteCoordinator,
        Decision,
        RemoteCoordinator,
        WhisperAnswer,
        reviewed,
    )
    from coordinator.compat import CoordinatorOptions, WorkspaceState
    from coordinator.coordinator import Coordinator
    from coordinator.engine.canonical import canonical_bytes, digest
    from coordinator.engine.clock import StepClock
    from coordinator.engine.ids import CounterIds
    from coordinator.engine.sweeps import Swept
    from coordinator.errors import (
        BatchWriteError,
        CanonicalError,
        ChaplineError,
        RestoreError,
        RpcError,
        SignatureError,
        UnknownWorkspaceError,
        UnsupportedOptionError,
    )
    from coordinator.listeners import Change, ListenerHandle
    from coordinator.security.signing import public_jwk, sign_envelope

# The one place the version is written: pyproject.toml reads it from here
# (setuptools, `version = {attr = ...}`) and `chapline --version` prints it.
__version__ = "0.1.0"

# name -> the module that defines it
_HOMES = {
    "AsyncRemoteCoordinator": "coordinator.client",
    "AuditEntry": "coordinator.audit",
    "BatchWriteError": "coordinator.errors",
    "CanonicalError": "coordinator.errors",
    "Change": "coordinator.listeners",
    "ChaplineError": "coordinator.errors",
    "Coordinator": "coordinator.coordinator",
    "CoordinatorOptions": "coordinator.compat",
    "CounterIds": "coordinator.engine.ids",
    "Decision": "coordinator.client",
    "ListenerHandle": "coordinator.listeners",
    "RemoteCoordinator": "coordinator.client",
    "RestoreError": "coordinator.errors",
    "RpcError": "coordinator.errors",
    "SignatureError": "coordinator.errors",
    "StepClock": "coordinator.engine.clock",
    "Swept": "coordinator.engine.sweeps",
    "UnknownWorkspaceError": "coordinator.errors",
    "UnsupportedOptionError": "coordinator.errors",
    "WhisperAnswer": "coordinator.client",
    "WorkspaceState": "coordinator.compat",
    "canonical_bytes": "coordinator.engine.canonical",
    "digest": "coordinator.engine.canonical",
    "reviewed": "coordinator.client",
    "public_jwk": "coordinator.security.signing",
    "sign_envelope": "coordinator.security.signing",
}

__all__ = [
    "__version__",
    "AsyncRemoteCoordinator",
    "AuditEntry",
    "BatchWriteError",
    "CanonicalError",
    "Change",
    "ChaplineError",
    "Coordinator",
    "CoordinatorOptions",
    "CounterIds",
    "Decision",
    "ListenerHandle",
    "RemoteCoordinator",
    "RestoreError",
    "RpcError",
    "SignatureError",
    "StepClock",
    "Swept",
    "UnknownWorkspaceError",
    "UnsupportedOptionError",
    "WhisperAnswer",
    "WorkspaceState",
    "canonical_bytes",
    "digest",
    "public_jwk",
    "reviewed",
    "sign_envelope",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'coordinator' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})
