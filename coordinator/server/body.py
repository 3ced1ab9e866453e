"""Request bodies, bounded on every route (SPECIFICATION.md, "Bounds on
memory and time"): no request holds more than `max_body_bytes` of the
server's memory, whether its client declared the length or not.

`BodyLimit` wraps the whole app, so /chap, /mcp, /a2a and the desk are held
to the same limit before any of them sees the request. A declared
Content-Length over the limit is refused before a byte of the body is read;
a chunked body is counted as it arrives and refused once it passes the
limit. With authentication on, an oversized request without a valid token is
refused as unauthenticated (401), not as too large, and is not read either:
its size says nothing to someone who may not call. Either refusal closes the
connection, so the rest of the body is never read.
"""

from __future__ import annotations

import msgspec

from coordinator.engine.wire import INVALID_REQUEST, error_response
from coordinator.errors import RpcError
from coordinator.extras import needs
from coordinator.server.auth import Authenticator

with needs("server"):
    from starlette.datastructures import Headers
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyLimit"]


class BodyLimit:
    """ASGI middleware refusing request bodies over `max_body_bytes` with 413
    and a JSON-RPC error (-32600), or 401 first when `auth` is given and the
    request carries no valid bearer token."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, auth: Authenticator | None = None) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.auth = auth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        if declared is not None:
            if declared.isdigit() and int(declared) > self.max_body_bytes:
                await self._refuse(headers, send)
                return
            await self.app(scope, receive, send)
            return
        if "chunked" not in headers.get("transfer-encoding", "").lower():
            await self.app(scope, receive, send)  # no body
            return
        # Chunked: read it here, counting, and hand the app what was read.
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away; nothing to answer
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                await self._refuse(headers, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, headers: Headers, send: Send) -> None:
        status = 413
        error = RpcError(
            INVALID_REQUEST,
            f"Request body larger than {self.max_body_bytes} bytes; send a smaller "
            "envelope (the server's --max-body sets the limit)",
        )
        extra: list[tuple[bytes, bytes]] = []
        if self.auth is not None:
            try:
                self.auth.principal(headers.get("authorization"))
            except RpcError as refused:
                status, error = 401, refused
                extra = [(b"www-authenticate", b'Bearer realm="chap"')]
        body = msgspec.json.encode(error_response(None, error))
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    # The rest of the body is never read: uvicorn closes the
                    # connection after this response instead of draining it.
                    (b"connection", b"close"),
                    *extra,
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body, already read, given back first."""
    pending = [body]

    async def replayed() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replayed
