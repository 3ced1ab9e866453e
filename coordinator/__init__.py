"""chapline: a write-ahead CHAP coordinator."""

from coordinator.audit import AuditEntry
from coordinator.canonical import CanonicalError, canonical_bytes, digest
from coordinator.clock import StepClock
from coordinator.coordinator import BatchWriteError, Coordinator
from coordinator.snapshot import RestoreError
from coordinator.ids import CounterIds
from coordinator.wire import RpcError

__all__ = [
    "AuditEntry",
    "BatchWriteError",
    "CanonicalError",
    "Coordinator",
    "CounterIds",
    "RestoreError",
    "RpcError",
    "StepClock",
    "canonical_bytes",
    "digest",
]
