"""A stopping server's drain: between "stop accepting" and uvicorn closing the
connections left (SPECIFICATION.md, "`chapline serve`", Stopping).

Closing an idle keep-alive connection races with a client sending its next
request on it, and closing a connection accepted a moment ago drops the
request on its way. So a stopping server first lets every connection settle:
one accepted but without a request yet gets it (the call is answered), and
every answer from then on says `Connection: close`, so a client's busy
keep-alive connection ends after its answer, cleanly, and its next call goes
to a new connection (under `serve --workers`, another worker). Only
connections idle for a while, or any left after the grace, are then closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

__all__ = ["Draining", "settle"]

# Up to how long a stop waits for connections to settle, and how long a
# keep-alive connection must have been idle to count as settled (a client in
# a loop sends its next call within milliseconds of an answer).
GRACE = 1.0
QUIET = 0.2

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class Draining:
    """ASGI wrapper: once `on` is set, every HTTP answer says `Connection:
    close` (uvicorn then closes the connection after it)."""

    def __init__(self, app: Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]) -> None:
        self.app = app
        self.on = False

    async def __call__(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def closing(message: Message) -> None:
            if self.on and message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", ()) if h[0].lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


async def settle(connections: Iterable[Any], grace: float = GRACE, quiet: float = QUIET) -> None:
    """Return once every connection (uvicorn's HTTP/1 protocols) has settled
    (see the module's text), or after `grace` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    idle_since: dict[int, tuple[object, float]] = {}  # id(connection) -> (its last cycle, first seen idle)
    while loop.time() < deadline:
        now = loop.time()
        settled = True
        for connection in list(connections):
            cycle: Any = getattr(connection, "cycle", False)
            if cycle is False:
                continue  # not an HTTP/1 connection: uvicorn's shutdown handles it
            if cycle is None or not cycle.response_complete:
                settled = False  # its request is coming, or being answered
                continue
            seen = idle_since.get(id(connection))
            if seen is None or seen[0] is not cycle:
                idle_since[id(connection)] = (cycle, now)
                settled = False
            elif now - seen[1] < quiet:
                settled = False
        if settled:
            return
        await asyncio.sleep(0.01)
