"""Transports: ways to reach a Coordinator from outside the process."""

from coordinator.errors import DispatcherClosed
from coordinator.server.dispatcher import Dispatcher, SerialDispatcher
from coordinator.server.http import MAX_BODY_BYTES, create_app

__all__ = ["MAX_BODY_BYTES", "Dispatcher", "DispatcherClosed", "SerialDispatcher", "create_app"]
