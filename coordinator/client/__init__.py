"""[client] chapline for agents in other processes: `RemoteCoordinator` (and
`AsyncRemoteCoordinator`) call `chapline serve` over HTTP as an embedded
Coordinator answers, and wait for people's decisions (SPECIFICATION.md,
"RemoteCoordinator", "Waiting for people")."""

from __future__ import annotations

from coordinator.client.remote import AsyncRemoteCoordinator, RemoteCoordinator, Retry, SigningKey
from coordinator.client.reviewed import reviewed
from coordinator.client.waiting import Decision, WhisperAnswer
from coordinator.errors import RemoteRefused, RemoteUnavailable, WaitTimedOut

__all__ = [
    "AsyncRemoteCoordinator",
    "Decision",
    "RemoteCoordinator",
    "RemoteRefused",
    "RemoteUnavailable",
    "Retry",
    "SigningKey",
    "WaitTimedOut",
    "WhisperAnswer",
    "reviewed",
]
