"""Server-sent events: each recorded audit entry, pushed to every open stream.

The coordinator calls `publish` on its worker thread once an entry is
durable. Publishing never waits for a reader: each stream has a small buffer
(`max_buffered` events) that `publish` appends to under a lock. The streams'
tasks are woken by one tick for all (or at once when a buffer is half full),
so each sends what gathered since in one go. A stream whose buffer is full has fallen
behind: its buffer is dropped at once, it is taken off the hub (the writer
no longer sees it) and it ends with `event: end` (reason "lagged") as soon
as its reader takes what was already sent. The reader reconnects with
`Last-Event-ID` and the stream replays what it missed from the store, not
from memory (SPECIFICATION.md, "Review desk").

Every way a stream ends is said first, as `event: end` with data
`{"reason", "message"}`; the reasons are END_REASONS.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal

import msgspec

from coordinator.engine.wire import INVALID_REQUEST, OPEN_LIMIT_REACHED
from coordinator.errors import OpenLimitError, RpcError
from coordinator.listeners import Change

__all__ = [
    "END_REASONS",
    "HEARTBEAT_SECONDS",
    "MAX_BUFFERED",
    "STREAM_BYTES",
    "MAX_STREAMS",
    "MAX_STREAMS_PER_PRINCIPAL",
    "OBJECTS_BYTES",
    "TICK_PER_STREAM",
    "TICK_SECONDS",
    "EndReason",
    "EventHub",
    "EventStream",
    "ReadAfter",
    "resume_points",
]

EndReason = Literal["lagged", "token_revoked", "token_expired", "server_stopping", "rotated"]
END_REASONS: tuple[EndReason, ...] = ("lagged", "token_revoked", "token_expired", "server_stopping", "rotated")

# Events a stream may hold for a reader that has not taken them. Small: a
# reader this far behind reconnects and replays from the store instead.
MAX_BUFFERED = 64
# Open streams in all, and per authenticated principal (a desk holds one per tab).
MAX_STREAMS = 4096
MAX_STREAMS_PER_PRINCIPAL = 32
# A comment line this often keeps proxies and the browser from timing out.
HEARTBEAT_SECONDS = 15.0
# Streams are woken by one clock for all (`EventHub`'s tick), not one timer
# each: a stream with new events sends them at the next tick, all at once,
# or at once when half its buffer is full. One send per stream per tick, not
# one per write, is what keeps many streams cheap, and finds out a reader
# that does not read in a few sends. The tick grows with the number of open
# streams (TICK_PER_STREAM each), between these bounds.
TICK_SECONDS = (0.05, 1.0)
TICK_PER_STREAM = 0.0005
# Entries read from the store per step of a replay.
REPLAY_PAGE = 32
# Events are sent joined up to this many bytes (a larger one alone), so what
# a reader has in flight is bounded by bytes as well as by events.
CHUNK_BYTES = 64 * 1024
# Live bytes one connection carries before it ends ("rotated") and its
# reader reconnects with Last-Event-ID. The kernel takes megabytes for a
# reader that never reads before the server sees it fall behind, so without
# this each such stream would cost the server that much sending; a reader
# that reads pays one reconnect per budget.
STREAM_BYTES = 64 * 1024
# The most an event's objects may weigh: larger ones (a big draft) are left
# out, and the desk reads the workspace instead, so a few events do not use
# up a stream's STREAM_BYTES.
OBJECTS_BYTES = 16 * 1024

_MESSAGES: dict[EndReason, str] = {
    "lagged": "This stream fell behind the log and was ended; reconnect with "
    "Last-Event-ID to receive what was missed",
    "token_revoked": "The bearer token of this stream was revoked or is no longer known; "
    "sign in again with a valid token",
    "token_expired": "The bearer token of this stream expired; sign in again with a fresh token",
    "server_stopping": "The server is stopping; reconnect with Last-Event-ID once it is back",
    "rotated": "This stream carried its share of the log; reconnect with Last-Event-ID to go on",
}

_encode = msgspec.json.Encoder().encode

ReadAfter = Callable[[str, int, int], Awaitable[list[bytes]]]
"""`read(workspace, start, stop)`: the stored JSON text of the entries
`start <= seq < stop` of one workspace, in seq order (fewer at the log's end)."""


def _event(workspace: str, seq: int, entry_json: bytes, objects_json: bytes | None = None) -> bytes:
    data = b'{"workspace":%s,"entry":%s' % (_encode(workspace), entry_json)
    if objects_json is not None:
        data += b',"objects":' + objects_json
    return b"event: audit\nid: %s:%d\ndata: %s}\n\n" % (workspace.encode(), seq, data)


def _end_event(reason: EndReason) -> bytes:
    data = _encode({"reason": reason, "message": _MESSAGES[reason]})
    return b"event: end\ndata: %s\n\n" % data


class EventStream:
    """One open stream: its filter, its owner and its buffer.

    `credential` is the Authorization header the stream was opened with
    (None without authentication), so a re-check of rights can end it.
    """

    __slots__ = ("workspace", "principal", "credential", "visible", "buffer", "ended", "wake", "waiting", "beat")

    def __init__(
        self,
        workspace: str | None,
        principal: str | None,
        credential: str | None,
        visible: Callable[[str], bool] | None = None,
    ) -> None:
        self.workspace = workspace
        self.principal = principal
        self.credential = credential
        # For a stream of every workspace under auth: which ones its reader
        # may read, asked at each entry (a join or leave changes it).
        self.visible = visible
        # (workspace, seq, event bytes), oldest first; touched under the hub's lock.
        self.buffer: list[tuple[str, int, bytes]] = []
        self.ended: EndReason | None = None
        # Set by the hub's tick (or at once, see `publish`) while its task
        # waits; `beat`: a heartbeat is due.
        self.wake = asyncio.Event()
        self.waiting = False
        self.beat = False


_Woken = list[EventStream]


def _wake(loop: asyncio.AbstractEventLoop | None, woken: _Woken) -> None:
    """From any thread: wake the streams' tasks with one call into their loop."""
    if woken and loop is not None:
        try:
            loop.call_soon_threadsafe(_set_all, woken)
        except RuntimeError:  # its loop has closed: nobody is listening
            pass


def _set_all(woken: _Woken) -> None:
    for stream in woken:
        stream.wake.set()


class EventHub:
    """Fan-out of audit entries to the open event streams, with caps: at most
    `max_buffered` events waiting per stream (more and it ends, "lagged"),
    `max_streams` open in all and `max_streams_per_principal` per principal,
    and `stream_bytes` of live events carried per connection ("rotated")."""

    def __init__(
        self,
        *,
        max_buffered: int = MAX_BUFFERED,
        max_streams: int = MAX_STREAMS,
        max_streams_per_principal: int = MAX_STREAMS_PER_PRINCIPAL,
        stream_bytes: int = STREAM_BYTES,
    ) -> None:
        for name, value in (("max_buffered", max_buffered), ("max_streams", max_streams),
                            ("max_streams_per_principal", max_streams_per_principal),
                            ("stream_bytes", stream_bytes)):
            if value < 1:
                raise ValueError(f"{name} must be positive, got {value}")
        self.max_buffered = max_buffered
        self.max_streams = max_streams
        self.max_streams_per_principal = max_streams_per_principal
        self.stream_bytes = stream_bytes
        self._enough = max(1, max_buffered // 2)
        self._lock = threading.Lock()
        # Waiting streams with new events, for the next tick; the loop the
        # streams live on and the task that ticks (while any is open).
        self._due: set[EventStream] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ticker: asyncio.Task[None] | None = None
        # Streams by the workspace they follow (None: every workspace).
        self._following: dict[str | None, set[EventStream]] = {}
        self._by_principal: dict[str, int] = {}
        self._open = 0
        self._closed = False
        # How many streams ended for each reason, and the most events any
        # stream's buffer held (never above max_buffered): for the operator and tests.
        self.ended: dict[EndReason, int] = dict.fromkeys(END_REASONS, 0)
        self.most_buffered = 0
        # How to hear of calls (`listen_on`), and the listener while any
        # stream is open: telling a listener what a call changed costs every
        # call a copy of its objects, which nobody needs while no desk is open.
        self._subscribe: Callable[[Callable[[Change], None]], Any] | None = None
        self._listening: Any = None

    def listen_on(self, subscribe: Callable[[Callable[[Change], None]], Any]) -> None:
        """Hear of calls through `subscribe(publish)` (a coordinator's
        `add_change_listener`) while any stream is open. A stream opened
        misses nothing: what was durable before it listened is in the store,
        which its replay and the desk's snapshot read after it opened."""
        self._subscribe = subscribe

    # -- the writer's side ------------------------------------------------

    def publish(self, change: Change) -> None:
        """A change listener: called on the coordinator's thread. O(1) per
        stream. The event carries the entry and the objects the call wrote
        (`{collection: {key: object or null}}`), so a desk updates what it
        shows without reading the workspace again."""
        workspace_id, entry = change.workspace, change.entry
        if not self._following.get(workspace_id) and not self._following.get(None):
            return  # nobody follows it: nothing to encode
        objects = None if change.objects is None else _encode(change.objects)
        if objects is not None and len(objects) > OBJECTS_BYTES:
            objects = None  # the desk reads the workspace instead
        event = (workspace_id, entry.seq, _event(workspace_id, entry.seq, _encode(entry.to_dict()), objects))
        woken: _Woken = []
        # Whether a filtered stream may see this entry, asked once per
        # credential (its streams all see the same), not once per stream.
        verdicts: dict[str | None, bool] = {}
        with self._lock:
            for group in (self._following.get(workspace_id), self._following.get(None)):
                if not group:
                    continue
                for stream in tuple(group):  # a copy: lagging ones leave the set
                    if stream.visible is not None:
                        seen = verdicts.get(stream.credential)
                        if seen is None:
                            seen = verdicts[stream.credential] = stream.visible(workspace_id)
                        if not seen:
                            continue
                    buffer = stream.buffer
                    if len(buffer) >= self.max_buffered:
                        self._end(stream, "lagged", woken)
                        continue
                    buffer.append(event)
                    if len(buffer) > self.most_buffered:
                        self.most_buffered = len(buffer)
                    if stream.waiting:
                        if len(buffer) >= self._enough:
                            stream.waiting = False
                            self._due.discard(stream)
                            woken.append(stream)
                        else:
                            self._due.add(stream)
        _wake(self._loop, woken)

    # -- ending streams -----------------------------------------------------

    def close(self) -> None:
        """End every stream (a server stopping), and refuse new ones."""
        woken: _Woken = []
        with self._lock:
            self._closed = True
            for stream in self._all():
                self._end(stream, "server_stopping", woken)
        _wake(self._loop, woken)
        if self._loop is not None and self._ticker is not None:
            # Every stream was woken to end: nothing is due any more.
            try:
                self._loop.call_soon_threadsafe(self._ticker.cancel)
            except RuntimeError:  # its loop has closed
                pass

    def end_credential(self, credential: str, reason: EndReason) -> int:
        """End every stream opened with `credential`; how many there were."""
        woken: _Woken = []
        with self._lock:
            mine = [s for s in self._all() if s.credential == credential]
            for stream in mine:
                self._end(stream, reason, woken)
        _wake(self._loop, woken)
        return len(mine)

    def credentials(self) -> set[str]:
        """The credentials that have streams open (for the rights re-check)."""
        with self._lock:
            return {s.credential for s in self._all() if s.credential is not None}

    def open_streams(self, principal: str | None = None) -> int:
        """How many streams are open, in all or of `principal`."""
        with self._lock:
            return self._open if principal is None else self._by_principal.get(principal, 0)

    def _all(self) -> list[EventStream]:
        return [s for group in self._following.values() for s in group]

    def _end(self, stream: EventStream, reason: EndReason, woken: _Woken) -> None:
        """Under the lock: take `stream` off the hub, drop what it holds, note it to wake."""
        if stream.ended is not None:
            return
        stream.ended = reason
        stream.buffer = []
        self.ended[reason] += 1
        self._forget(stream)
        if stream.waiting:
            stream.waiting = False
            woken.append(stream)

    def _forget(self, stream: EventStream) -> None:
        self._due.discard(stream)
        group = self._following.get(stream.workspace)
        if group is None or stream not in group:
            return
        group.discard(stream)
        if not group:
            del self._following[stream.workspace]
        self._open -= 1
        if not self._open and self._listening is not None:
            self._listening.detach()
            self._listening = None
        if stream.principal is not None:
            left = self._by_principal[stream.principal] - 1
            if left:
                self._by_principal[stream.principal] = left
            else:
                del self._by_principal[stream.principal]

    # -- a reader's side -----------------------------------------------------

    def open(
        self,
        workspace: str | None,
        principal: str | None,
        credential: str | None,
        visible: Callable[[str], bool] | None = None,
    ) -> EventStream:
        """Register a new stream (on the event loop), or raise OpenLimitError
        (or RpcError when the server is stopping). Each counts against
        `max_streams`, and one of an authenticated principal against
        `max_streams_per_principal` too."""
        stream = EventStream(workspace, principal, credential, visible)
        with self._lock:
            if self._closed:
                raise RpcError(INVALID_REQUEST, "The server is stopping; reconnect once it is back")
            if self._open >= self.max_streams:
                raise OpenLimitError(
                    OPEN_LIMIT_REACHED,
                    f"The server has {self._open} event streams open, its limit; close one "
                    "(another tab or client) or retry later",
                    {"limit": self.max_streams, "open": self._open},
                )
            held = self._by_principal.get(principal, 0) if principal is not None else 0
            if principal is not None and held >= self.max_streams_per_principal:
                raise OpenLimitError(
                    OPEN_LIMIT_REACHED,
                    f"{principal} has {held} event streams open, the limit per participant; "
                    "close one (another tab or client) before opening another",
                    {"limit": self.max_streams_per_principal, "open": held, "principal": principal},
                )
            self._following.setdefault(workspace, set()).add(stream)
            self._open += 1
            if self._listening is None and self._subscribe is not None:
                self._listening = self._subscribe(self.publish)
            if principal is not None:
                self._by_principal[principal] = held + 1
        if self._ticker is None or self._ticker.done():
            self._loop = asyncio.get_running_loop()
            self._ticker = self._loop.create_task(self._tick())
        return stream

    async def _tick(self) -> None:
        """While any stream is open: wake the due ones every tick, and every
        waiting one for a heartbeat every HEARTBEAT_SECONDS."""
        assert self._loop is not None
        low, high = TICK_SECONDS
        last_beat = self._loop.time()
        while True:
            await asyncio.sleep(min(high, max(low, self._open * TICK_PER_STREAM)))
            now = self._loop.time()
            with self._lock:
                if not self._open:
                    return
                woken = [s for s in self._due if s.waiting]
                self._due.clear()
                if now - last_beat >= HEARTBEAT_SECONDS:
                    last_beat = now
                    for stream in self._all():
                        if stream.waiting and not stream.buffer:
                            stream.beat = True
                            woken.append(stream)
                for stream in woken:
                    stream.waiting = False
            _set_all(woken)

    async def events(
        self, stream: EventStream, resume: dict[str, int], read: ReadAfter
    ) -> AsyncIterator[bytes]:
        """The body of one stream `open` registered: `event: ready`, what
        the store holds after each `resume` point (workspace -> last seq
        seen), then live entries, until the stream ends with `event: end`."""
        sent = dict(resume)
        carried = 0  # live bytes sent (stream_bytes)
        try:
            yield b"event: ready\ndata: {}\n\n"
            for workspace, last in resume.items():
                start = last + 1
                while stream.ended is None:
                    texts = await read(workspace, start, start + REPLAY_PAGE)
                    if texts:
                        for chunk in _chunks([_event(workspace, start + i, t) for i, t in enumerate(texts)]):
                            yield chunk
                        start += len(texts)
                        sent[workspace] = start - 1
                    if len(texts) < REPLAY_PAGE:
                        break
            while True:
                with self._lock:
                    taken, stream.buffer = stream.buffer, []
                    ended, beat = stream.ended, stream.beat
                    stream.beat = False
                    if not taken and ended is None and not beat:
                        stream.waiting = True
                        stream.wake.clear()
                if taken:
                    # Entries the replay already sent come again live: skip them.
                    fresh = [e for w, seq, e in taken if seq > sent.get(w, -1)]
                    for w, seq, _ in taken:
                        sent[w] = max(seq, sent.get(w, -1))
                    del taken
                    for chunk in _chunks(fresh):
                        carried += len(chunk)
                        yield chunk
                    if carried >= self.stream_bytes:
                        with self._lock:
                            self.ended["rotated"] += 1
                        yield _end_event("rotated")
                        return
                elif ended is not None:
                    yield _end_event(ended)
                    return
                elif beat:
                    yield b": heartbeat\n\n"
                else:
                    await stream.wake.wait()
        finally:
            self.release(stream)

    def release(self, stream: EventStream) -> None:
        """Take a stream that ended or whose reader left off the hub (idempotent)."""
        with self._lock:
            stream.waiting = False
            self._forget(stream)


def _chunks(events: list[bytes]) -> Iterator[bytes]:
    """`events` joined into chunks of at most CHUNK_BYTES (a larger event alone)."""
    group: list[bytes] = []
    size = 0
    for event in events:
        if group and size + len(event) > CHUNK_BYTES:
            yield b"".join(group)
            group, size = [], 0
        group.append(event)
        size += len(event)
    if group:
        yield b"".join(group)


_POINT = re.compile(r"^(?:([^\s:,]+):)?(\d{1,18})$")


def resume_points(header: str | None, workspace: str | None) -> dict[str, int]:
    """Where a reconnecting reader left off, from its `Last-Event-ID`:
    `W:SEQ` (the id of an event), a comma-separated list of them (the last
    of each workspace a reader of every workspace saw), or, on the stream of
    one workspace, a bare `SEQ`. Raises ValueError for anything else."""
    if header is None or not header.strip():
        return {}
    points: dict[str, int] = {}
    for part in header.split(","):
        found = _POINT.match(part.strip())
        if found is None:
            raise ValueError(
                f"Last-Event-ID {header!r} is not an event id: send the id of the last event "
                "received (WORKSPACE:SEQ), or a comma-separated list of them"
            )
        named, seq = found.group(1) or workspace, int(found.group(2))
        if named is None:
            raise ValueError(
                f"Last-Event-ID {header!r} names no workspace; on a stream of every "
                "workspace send WORKSPACE:SEQ"
            )
        if workspace is not None and named != workspace:
            continue  # another workspace: this stream does not carry it
        points[named] = seq
    return points
