"""CHAP over HTTP: the ASGI application behind `chapline serve`.

POST /chap (or /) carries one JSON-RPC envelope; the body of every answer is
JSON, errors included, because CHAP clients (the conformance harness among
them) parse the body whatever the status. A result is 200 and a refusal 400,
as the Python reference server answers; an error the caller cannot fix is not
a 400: a defect is 500, a store that did not take the call 503 (`status_of`).
The full contract is in
SPECIFICATION.md, "HTTP binding". With a TokenStore, every call must carry
a bearer token and may act only as its principal (server/auth.py). GET /
and the paths under /desk and /chap/events serve the review desk
(server/desk/).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import Any

import msgspec

from coordinator.engine.incidents import internal_error
from coordinator.engine.wire import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    PARSE_ERROR,
    STORE_CONFLICT,
    STORE_WRITE_FAILED,
    STORED_OBJECT_UNREADABLE,
    error_response,
)
from coordinator.errors import DispatcherClosed, RpcError
from coordinator.extras import installed, needs
from coordinator.profiles import REGISTRY
from coordinator.server.auth import Authenticator
from coordinator.server.body import MAX_BODY_BYTES, read_body
from coordinator.server.desk import DeskTarget, EventHub, desk_routes
from coordinator.server.dispatcher import SerialDispatcher, sweep_every
from coordinator.server.drain import Draining, settle

with needs("server"):
    import uvicorn
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Route

__all__ = ["MAX_BODY_BYTES", "MCP_PATH", "AppServer", "create_app", "status_of"]

log = logging.getLogger(__name__)

PATHS = ("/chap", "/")
MCP_PATH = "/mcp"

# Browsers may call the endpoint from any origin: the caller is identified
# inside the envelope or by a bearer token, never by cookies.
_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, OPTIONS",
    "Access-Control-Allow-Headers": "Content-Type, Authorization",
}

_encoder = msgspec.json.Encoder()

# Errors that are not the caller's to fix. A defect, or a stored row the
# operator must repair: 500. The store down or out-raced twice: nothing was
# applied and the same call may succeed later, so 503.
_SERVER_SIDE = {
    INTERNAL_ERROR: 500,
    STORED_OBJECT_UNREADABLE: 500,
    STORE_WRITE_FAILED: 503,
    STORE_CONFLICT: 503,
}


def status_of(response: dict[str, Any]) -> int:
    """The HTTP status of a coordinator's JSON-RPC response."""
    error = response.get("error")
    if error is None:
        return 200
    return _SERVER_SIDE.get(error.get("code"), 400)


def create_app(
    target: DeskTarget,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth: Authenticator | None = None,
    host: str = "127.0.0.1",
    public_url: str = "http://127.0.0.1:8080",
    sweep_interval: float = 0,
) -> Starlette:
    """An ASGI app serving `target` (a Coordinator) over HTTP: CHAP at
    POST /chap, MCP (streamable HTTP) at /mcp, A2A at /a2a with its Agent
    Card at /.well-known/agent-card.json, and the review desk. MCP and A2A
    are served where their extras (chapline[mcp], chapline[a2a]) are installed.

    `host` is the address the server listens on: on loopback, MCP requests
    must name a loopback Host and Origin (DNS-rebinding protection).
    `public_url` is how clients reach the server, for the Agent Card.

    With `auth`, authentication is required: a call without a valid bearer
    token is answered 401, one whose `from` is not the token's principal 403,
    and neither reaches the coordinator; MCP tool calls and A2A messages are
    held to the same rules. Without it, anyone who can reach the port may act
    as any participant.

    With `sweep_interval` > 0 (seconds), the lifespan also runs
    `target.sweep()` that often, on the dispatcher's thread between calls
    (expired work leases reclaimed, overdue whispers lapsed), and stops it
    before the dispatcher closes.

    Calls are run one at a time, off the event loop, by a SerialDispatcher
    (`app.state.dispatcher`) that the app's lifespan starts and closes. The
    app never closes `target`: its owner does, after the server has stopped,
    and closes the dispatcher first, because a forced stop (a second Ctrl-C)
    skips the lifespan shutdown.
    """
    if max_body_bytes < 1:
        raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
    if not sweep_interval >= 0:
        raise ValueError(f"sweep_interval must be 0 (no timer) or positive, got {sweep_interval}")
    dispatcher = SerialDispatcher(target)
    registry = getattr(target, "registry", REGISTRY)  # a Coordinator's own, given or default
    methods = registry.methods() + registry.extension_methods()
    # MCP and A2A, served beside POST /chap where their extras are installed.
    agents: list[BaseRoute] = []
    mcp_server = None
    if installed("mcp"):
        from coordinator.server.mcp import create_mcp_server

        mcp_server = create_mcp_server(dispatcher.dispatch, methods, auth=auth)
        # The SDK builds an app with one route; we serve that route beside ours.
        (mcp_route,) = [
            r for r in mcp_server.streamable_http_app(host=host).routes if getattr(r, "path", "") == MCP_PATH
        ]
        agents.append(mcp_route)
    if installed("a2a"):
        from coordinator.server.a2a import A2A_PATH, a2a_routes

        agents += a2a_routes(dispatcher.dispatch, methods, public_url + A2A_PATH, auth, max_body_bytes)

    async def chap(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=_CORS)
        body = await read_body(request, max_body_bytes)
        if body is None:
            return _rpc_error(
                400, PARSE_ERROR, f"Request body larger than {max_body_bytes} bytes"
            )
        if auth is not None:
            refusal = auth.refusal(request.headers.get("authorization"), body)
            if refusal is not None:
                status, request_id, error = refusal
                if status == 401:
                    return _unauthenticated(error)
                return _json(status, error_response(request_id, error))
        try:
            response = await dispatcher.dispatch(body)
        except DispatcherClosed:
            return _rpc_error(503, INTERNAL_ERROR, "The server is shutting down; retry elsewhere")
        return _json(status_of(response), response)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dispatcher.start()
        timer = None
        if sweep_interval > 0:
            timer = asyncio.create_task(sweep_every(dispatcher, target.sweep, sweep_interval))
        try:
            async with contextlib.AsyncExitStack() as running:
                if mcp_server is not None:
                    await running.enter_async_context(mcp_server.session_manager.run())
                yield
        finally:
            if timer is not None:
                timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await timer
            # Runs after the server stopped taking requests: finish the calls
            # already queued, off the loop, so their writes reach the store.
            await asyncio.to_thread(dispatcher.close)

    routes: list[BaseRoute] = [Route(path, chap, methods=["POST", "OPTIONS"]) for path in PATHS]
    routes += agents
    hub = EventHub()
    routes += desk_routes(target, dispatcher, auth, hub)
    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    # /chap/ is another path (404 JSON), not a redirect with an empty body.
    app.router.redirect_slashes = False
    app.state.dispatcher = dispatcher
    # Open event streams never finish on their own; whoever stops the server
    # ends them first (`app.state.events.close()`), or the stop waits for them.
    app.state.events = hub
    return app


class AppServer(uvicorn.Server):
    """uvicorn serving an app `create_app` built, which ends the desk's event
    streams when asked to stop (they never finish on their own, and a graceful
    stop waits for every response), and stops once `stop` is set (a signal
    its handler could not deliver). `ready` is called once it accepts
    connections (`serve --workers`: a reload waits for it)."""

    def __init__(
        self, config: uvicorn.Config, stop: threading.Event, ready: Callable[[], None] | None = None
    ) -> None:
        app: Any = config.app  # the Starlette app create_app built
        self._app = app
        self._draining = Draining(app)
        config.app = self._draining
        super().__init__(config)
        self._stop = stop
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._ready is not None:
            self._ready()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Stop accepting, then let the connections settle before uvicorn
        # closes those left (coordinator/server/drain.py): under `--workers`
        # the other workers take the new connections, and a reload fails no
        # call (SPECIFICATION.md, "Several processes on one database").
        for server in self.servers:
            server.close()
        self._draining.on = True
        await settle(self.server_state.connections)
        await super().shutdown(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self._app.state.events.close()
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self._stop.is_set():
            self.handle_exit(signal.SIGTERM, None)
        return await super().on_tick(counter)


def _json(status: int, payload: dict[str, Any]) -> Response:
    return Response(
        content=_encoder.encode(payload),
        status_code=status,
        media_type="application/json",
        headers=_CORS,
    )


def _unauthenticated(err: RpcError) -> Response:
    response = _json(401, error_response(None, err))
    response.headers["WWW-Authenticate"] = 'Bearer realm="chap"'
    return response


def _rpc_error(status: int, code: int, message: str) -> Response:
    # Transport-level refusals have no envelope to take an id from.
    return _json(status, error_response(None, RpcError(code, message)))


async def _http_error(request: Request, exc: Exception) -> Response:
    """Wrong path (404) or wrong method (405), still as a JSON-RPC error."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        message = f"Not found: {request.url.path}; CHAP is served at POST /chap"
    elif exc.status_code == 405:
        message = f"Method {request.method} not allowed; send the envelope with POST"
    else:
        message = exc.detail
    response = _rpc_error(exc.status_code, INVALID_REQUEST, message)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


async def _internal_error(request: Request, exc: Exception) -> Response:
    # Logged for the operator; the caller gets the log id, no traceback.
    error = internal_error(log, f"unhandled error serving {request.method} {request.url.path}", exc)
    return _json(500, error_response(None, error))
