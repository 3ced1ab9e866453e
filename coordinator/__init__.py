"""chapline: a write-ahead CHAP coordinator."""

# The one place the version is written: pyproject.toml reads it from here
# (setuptools, `version = {attr = ...}`) and `chapline --version` prints it.
__version__ = "0.1.0"

from coordinator.audit import AuditEntry
from coordinator.compat import CoordinatorOptions, UnsupportedOptionError, WorkspaceState
from coordinator.engine.canonical import CanonicalError, canonical_bytes, digest
from coordinator.engine.clock import StepClock
from coordinator.engine.ids import CounterIds
from coordinator.engine.pipeline import Coordinator
from coordinator.engine.snapshot import RestoreError, UnknownWorkspaceError
from coordinator.engine.sweeps import Swept
from coordinator.engine.wire import RpcError
from coordinator.errors import BatchWriteError, ChaplineError
from coordinator.listeners import Change, Listening
from coordinator.security.signing import SignatureError, public_jwk, sign_envelope

__all__ = [
    "AuditEntry",
    "BatchWriteError",
    "CanonicalError",
    "Change",
    "ChaplineError",
    "Coordinator",
    "CoordinatorOptions",
    "CounterIds",
    "Listening",
    "RestoreError",
    "RpcError",
    "SignatureError",
    "StepClock",
    "Swept",
    "UnknownWorkspaceError",
    "UnsupportedOptionError",
    "WorkspaceState",
    "__version__",
    "canonical_bytes",
    "digest",
    "public_jwk",
    "sign_envelope",
]
