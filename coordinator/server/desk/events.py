"""Server-sent events: each recorded audit entry, pushed to every open desk.

The coordinator calls `publish` on its worker thread once an entry is
durable; each subscriber is an asyncio queue on the event loop, filled with
`call_soon_threadsafe`. A subscriber that falls `MAX_BACKLOG` events behind is
dropped (its stream ends) rather than holding memory for it: the desk
reconnects and reloads what it shows.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator

import msgspec

from coordinator.audit import AuditEntry

__all__ = ["MAX_BACKLOG", "EventHub"]

MAX_BACKLOG = 1000
# A comment line this often keeps proxies and the browser from timing out.
HEARTBEAT_SECONDS = 15.0

_encode = msgspec.json.Encoder().encode
_END = b""


class _Subscriber:
    def __init__(self, workspace: str | None) -> None:
        self.workspace = workspace
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(MAX_BACKLOG)

    def offer(self, event: bytes) -> None:
        """On the loop: queue `event`, or end a stream that fell too far behind."""
        try:
            self.queue.put_nowait(event)
        except asyncio.QueueFull:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(_END)


class EventHub:
    """Fan-out of audit entries to the open event streams."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: set[_Subscriber] = set()
        self._closed = False

    @property
    def open_streams(self) -> int:
        """How many event streams are open now (a server's metrics read it)."""
        with self._lock:
            return len(self._subscribers)

    def publish(self, workspace_id: str, entry: AuditEntry) -> None:
        """An audit listener: called on the coordinator's thread."""
        data = _encode({"workspace": workspace_id, "entry": entry.to_dict()})
        event = b"event: audit\nid: %s:%d\ndata: %s\n\n" % (
            workspace_id.encode(),
            entry.seq,
            data,
        )
        self._send(event, workspace_id)

    def close(self) -> None:
        """End every stream (a server stopping), and refuse new ones."""
        with self._lock:
            self._closed = True
        self._send(_END, None)

    def _send(self, event: bytes, workspace_id: str | None) -> None:
        with self._lock:
            targets = [
                s
                for s in self._subscribers
                if workspace_id is None or s.workspace in (None, workspace_id)
            ]
        for sub in targets:
            try:
                sub.loop.call_soon_threadsafe(sub.offer, event)
            except RuntimeError:  # its loop has closed: nobody is listening
                pass

    async def stream(self, workspace: str | None) -> AsyncIterator[bytes]:
        """The event stream of one client: a `ready` event, then entries."""
        sub = _Subscriber(workspace)
        with self._lock:
            if self._closed:
                return
            self._subscribers.add(sub)
        try:
            yield b"event: ready\ndata: {}\n\n"
            while True:
                try:
                    event = await asyncio.wait_for(sub.queue.get(), HEARTBEAT_SECONDS)
                except TimeoutError:
                    yield b": heartbeat\n\n"
                    continue
                if event == _END:
                    return
                yield event
        finally:
            with self._lock:
                self._subscribers.discard(sub)
