"""Bounds on the time and the connections a client may hold (SPECIFICATION.md,
"Bounds on memory and time").

uvicorn closes an idle keep-alive connection (`timeout_keep_alive`) but
waits forever for a request's headers or body, and takes every connection
it is offered: a client that opens thousands and sends a byte now and then
holds as many file descriptors. `guarded_protocol` is uvicorn's HTTP
protocol with what is missing (the body limit is server/body.py's):

- a header timeout: from the connection (or the end of the previous
  response) to the end of the request's headers;
- a body timeout: from the end of the headers to the end of the body;
- a cap on the connections from one client address (answered 429) and on
  all of them (503), both checked when a connection is made. At the overall
  cap, the oldest connection still waiting for its headers is dropped to
  make room (a slow-header flood cannot lock out the clients that send
  their request at once); only when none is waiting is the new one refused.

Each refusal is a JSON-RPC error body, then the connection closes.
"""

from __future__ import annotations

import asyncio
import resource
import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinator.engine.wire import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR, error_response
from coordinator.errors import LimitError, RpcError
from coordinator.extras import needs

__all__ = ["MAX_BODY_BYTES", "ServerLimits", "guarded_protocol", "raise_fd_limit", "refusal_bytes"]

# CHAP requires accepting envelopes of at least 1 MiB (the engine's
# max_envelope_bytes): a body of that size is served.
MAX_BODY_BYTES = 1024 * 1024

# File descriptors the process needs beside its client connections: the
# database, the listening socket, logs, the interpreter's own.
_SPARE_FDS = 256


@dataclass(frozen=True)
class ServerLimits:
    """The bounds of one server process: the largest request body (bytes;
    `create_app`'s `max_body_bytes`), the timeouts (seconds) and the
    connection caps.

    The defaults leave every well-behaved client (the conformance harness,
    0.3.3's client, a browser) untouched: a request's headers arrive in one
    packet and its body right after.
    """

    max_body_bytes: int = MAX_BODY_BYTES
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: int = 5  # uvicorn's own default for keep-alive connections (whole seconds)
    max_connections: int = 4096
    max_connections_per_address: int = 256

    def __post_init__(self) -> None:
        for name in ("header_timeout", "body_timeout", "idle_timeout"):
            value = getattr(self, name)
            if not value > 0:
                raise LimitError(name, value, "a positive number of seconds")
        if not self.max_body_bytes >= 1:
            raise LimitError("max_body_bytes", self.max_body_bytes, "a positive number of bytes")
        for name in ("max_connections", "max_connections_per_address"):
            value = getattr(self, name)
            if not value >= 1:
                raise LimitError(name, value, "a positive number of connections")
        if self.max_connections_per_address > self.max_connections:
            raise LimitError(
                "max_connections_per_address",
                self.max_connections_per_address,
                f"at most max_connections ({self.max_connections})",
            )


def refusal_bytes(status: int, reason: str, code: int, message: str) -> bytes:
    """A whole HTTP/1.1 response with a JSON-RPC error body, closing the connection."""
    body = msgspec.json.encode(error_response(None, RpcError(code, message)))
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def raise_fd_limit(limits: ServerLimits) -> int:
    """Raise this process's soft limit on open files towards what
    `limits.max_connections` needs (never past the hard limit); the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + _SPARE_FDS
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return wanted
    return soft


class _Tally:
    """The connections of one server (shared by its protocol instances,
    which all run on the server's event loop)."""

    def __init__(self) -> None:
        self.total = 0
        self.by_address: Counter[str] = Counter()
        # Connections waiting for a request's headers, oldest first (a dict
        # keeps insertion order): the ones dropped first at the overall cap.
        self.waiting: dict[Any, None] = {}  # GuardedProtocol instances


# The event stream's path, and the send buffer its connections get: the
# server's kernel holds at most this much for a stream its reader does not
# take, not the megabytes a socket buffers by default (what a connection
# carries in all is bounded too: desk/events.py, STREAM_BYTES).
EVENTS_PATH = b"/chap/events"
STREAM_SEND_BUFFER = 32 * 1024


def guarded_protocol(limits: ServerLimits) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol held to `limits` (pass it as
    `uvicorn.Config(http=...)`, and `limits.idle_timeout` as its
    `timeout_keep_alive`). Each call makes a class with its own tally: one
    per server."""
    # Here, not at the top: the CLI reads ServerLimits without chapline[server].
    with needs("server"):
        from uvicorn.config import Config
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        from uvicorn.server import ServerState
    tally = _Tally()

    class GuardedProtocol(HttpToolsProtocol):
        def __init__(
            self,
            config: Config,
            server_state: ServerState,
            app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            self._address: str | None = None
            self._timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            address = self.client[0] if self.client else ""
            # A Unix socket's peer has no address: under `serve --workers`
            # the other workers passing on calls (server/affinity.py), all
            # of them "", so only the cap on all connections holds them.
            if self.client and tally.by_address[address] >= limits.max_connections_per_address:
                self._refuse(
                    429,
                    "Too Many Requests",
                    f"Too many connections from {address} (at most "
                    f"{limits.max_connections_per_address}); close some and retry",
                )
                return
            if tally.total >= limits.max_connections and tally.waiting:
                oldest = next(iter(tally.waiting))
                oldest.header_timed_out()
                oldest.release()
            if tally.total >= limits.max_connections:
                self._refuse(
                    503,
                    "Service Unavailable",
                    f"The server holds its maximum of {limits.max_connections} connections; retry later",
                )
                return
            self._address = address
            tally.total += 1
            tally.by_address[address] += 1
            self._await_headers()

        def connection_lost(self, exc: Exception | None) -> None:
            self.release()
            super().connection_lost(exc)

        def release(self) -> None:
            """No longer count this connection (it is closed or closing)."""
            self._cancel_timer()
            tally.waiting.pop(self, None)
            if self._address is not None:
                tally.total -= 1
                tally.by_address[self._address] -= 1
                if not tally.by_address[self._address]:
                    del tally.by_address[self._address]
                self._address = None

        def on_headers_complete(self) -> None:
            if self.url.split(b"?", 1)[0] == EVENTS_PATH:
                sock = self.transport.get_extra_info("socket")
                if sock is not None:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SEND_BUFFER)
            tally.waiting.pop(self, None)
            self._cancel_timer()
            self._timer = self.loop.call_later(limits.body_timeout, self.body_timed_out)
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._cancel_timer()
            super().on_message_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                # The next request's headers are due within the header timeout
                # (idle keep-alive connections close sooner, by uvicorn's timer).
                self._await_headers()

        def _await_headers(self) -> None:
            self._cancel_timer()
            tally.waiting[self] = None
            self._timer = self.loop.call_later(limits.header_timeout, self.header_timed_out)

        def _cancel_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def header_timed_out(self) -> None:
            tally.waiting.pop(self, None)
            self._refuse(
                408,
                "Request Timeout",
                f"The request's headers did not arrive within {limits.header_timeout:g} s",
            )

        def body_timed_out(self) -> None:
            self._timer = None
            if self.cycle is not None and not self.cycle.response_started:
                self._refuse(
                    408,
                    "Request Timeout",
                    f"The request's body did not arrive within {limits.body_timeout:g} s",
                )
            elif not self.transport.is_closing():
                self.transport.close()

        def send_400_response(self, msg: str) -> None:
            # uvicorn answers bytes that are not HTTP in plain text; ours is JSON too.
            self._refuse(400, "Bad Request", f"{msg} Send an HTTP/1.1 request.", PARSE_ERROR)

        def _refuse(self, status: int, reason: str, message: str, code: int | None = None) -> None:
            self._cancel_timer()
            if self.transport.is_closing():
                return
            if code is None:
                code = INTERNAL_ERROR if status == 503 else INVALID_REQUEST
            self.transport.write(refusal_bytes(status, reason, code, message))
            self.transport.close()

    return GuardedProtocol
