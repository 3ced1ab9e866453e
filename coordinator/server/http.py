"""CHAP over HTTP: the ASGI application behind `chapline serve`.

POST /chap (or /) carries one JSON-RPC envelope; the body of every answer is
JSON, errors included, because CHAP clients (the conformance harness among
them) parse the body whatever the status. A result is 200 and a refusal 400,
as the Python reference server answers; an error the caller cannot fix is not
a 400: a defect is 500, a store that did not take the call 503 (`status_of`).
The full contract is in
SPECIFICATION.md, "HTTP binding". With a TokenStore, every call must carry
a bearer token and may act only as its principal (server/auth.py), within
its token's scopes (server/authz.py). GET /
and the paths under /desk and /chap/events serve the review desk
(server/desk/). Every request passes the browser guard first
(server/browser.py: Host, Origin and Content-Type checks, security headers);
GET /healthz, /readyz and /metrics what an operator watches
(server/observed.py).
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
from typing import TYPE_CHECKING, Any

import msgspec

from coordinator.engine.incidents import internal_error
from coordinator.engine.wire import INVALID_REQUEST, error_response
from coordinator.errors import LimitError, RpcError
from coordinator.extras import installed, needs
from coordinator.profiles import REGISTRY
from coordinator.server.auth import Authenticator
from coordinator.server.authz import Gatekeeper
from coordinator.server.body import BodyLimit
from coordinator.server.browser import DEFAULT_POLICY, BrowserGuard, BrowserPolicy
from coordinator.server.chap_route import PATHS, ChapEndpoint, ChapShortcut, status_of
from coordinator.server.desk import DeskTarget, EventHub, desk_routes
from coordinator.server.dispatcher import SerialDispatcher, sweep_every
from coordinator.server.drain import Draining, settle
from coordinator.server.limits import MAX_BODY_BYTES
from coordinator.server.observed import Observability
from coordinator.server.rights import RightsWatch

with needs("server"):
    import uvicorn
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import BaseRoute, Route
    from starlette.types import ASGIApp

if TYPE_CHECKING:
    from coordinator.server.affinity import Affinity
    from coordinator.server.sessions import SessionLimits

__all__ = ["MAX_BODY_BYTES", "MCP_PATH", "AppServer", "create_app", "status_of"]

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"

_encoder = msgspec.json.Encoder()


def create_app(
    target: DeskTarget,
    *,
    max_body_bytes: int = MAX_BODY_BYTES,
    auth: Authenticator | None = None,
    browser: BrowserPolicy = DEFAULT_POLICY,
    public_url: str = "http://127.0.0.1:8080",
    sweep_interval: float = 0,
    events: EventHub | None = None,
    sessions: SessionLimits | None = None,
    observability: Observability | None = None,
    affinity: Affinity | None = None,
) -> Starlette:
    """An ASGI app serving `target` (a Coordinator) over HTTP: CHAP at
    POST /chap, MCP (streamable HTTP) at /mcp, A2A at /a2a with its Agent
    Card at /.well-known/agent-card.json, and the review desk. MCP and A2A
    are served where their extras (chapline[mcp], chapline[a2a]) are installed.

    `browser` says which Host names and which other sites' pages the
    server accepts, on every route (server/browser.py); by default loopback
    names and IP addresses, and no other origin. `public_url` is how
    clients reach the server, for the Agent Card.

    With `auth`, authentication is required: a call without a valid bearer
    token is answered 401, one whose `from` is not the token's principal 403,
    and neither reaches the coordinator; a call beyond the token's scopes is
    refused inside the coordinator, recorded as CHAP records refusals (-32011,
    server/authz.py). MCP tool calls and A2A messages are held to the same
    rules. Without it, anyone who can reach the port may act
    as any participant.

    A request body over `max_body_bytes` is refused (413) on every route,
    before it is read (server/body.py).

    With `sweep_interval` > 0 (seconds), the lifespan also runs
    `target.sweep()` that often, on the dispatcher's thread between calls
    (expired work leases reclaimed, overdue whispers lapsed), and stops it
    before the dispatcher closes.

    `events` is the hub of `GET /chap/events` (its buffer and caps; a
    default one without it), `sessions` the `SessionLimits` of MCP sessions
    (server/sessions.py). With `auth`, the tokens holding streams and
    sessions open are re-checked twice a second, and a revoked or expired
    one ends them (server/rights.py).

    `observability` says what the server watches of its calls (metrics at
    /metrics, traces, call logs, the checks of /readyz; /healthz is always
    served); by default an `Observability()`: metrics where chapline[metrics]
    is installed, traces where an OpenTelemetry SDK is configured.

    With `affinity` (a worker of `serve --workers N`), a call for a
    workspace another worker answers is passed to it (server/affinity.py).

    Calls are run one at a time, off the event loop, by a SerialDispatcher
    (`app.state.dispatcher`) that the app's lifespan starts and closes. The
    app never closes `target`: its owner does, after the server has stopped,
    and closes the dispatcher first, because a forced stop (a second Ctrl-C)
    skips the lifespan shutdown.
    """
    if max_body_bytes < 1:
        raise LimitError("max_body_bytes", max_body_bytes, "a positive number of bytes")
    if not sweep_interval >= 0:
        raise ValueError(f"sweep_interval must be 0 (no timer) or positive, got {sweep_interval}")
    registry = getattr(target, "registry", REGISTRY)  # a Coordinator's own, given or default
    methods = registry.methods() + registry.extension_methods()
    observed = observability if observability is not None else Observability()
    watched = observed.target(target, (m.name for m in methods))
    dispatcher = SerialDispatcher(watched)
    # Every call goes through the gate, held to its token's grant (server/authz.py);
    # the creates it runs itself are observed as every other call is.
    gate = Gatekeeper(dispatcher, watched)
    # MCP and A2A, served beside POST /chap where their extras are installed.
    hub = events if events is not None else EventHub()
    # With auth, the tokens holding streams and sessions open are re-checked.
    watch = None if auth is None else RightsWatch(auth)
    opened = watch.poke if watch is not None else (lambda: None)
    agents: list[BaseRoute] = []
    mcp_server = None
    mcp_gate = None
    if installed("mcp"):
        from mcp.server.transport_security import TransportSecuritySettings

        from coordinator.server.mcp import create_mcp_server
        from coordinator.server.sessions import McpGate, SessionLimits

        limits = sessions if sessions is not None else SessionLimits()
        mcp_server = create_mcp_server(gate, methods, auth=auth)
        # The SDK builds an app with one route; we serve that route beside
        # ours, behind a gate (authentication and caps). The SDK's own idle
        # timeout is a backstop to the gate's. The browser guard checks Host
        # and Origin on every route, /mcp included, so the SDK's check is off.
        (mcp_route,) = [
            r
            for r in mcp_server.streamable_http_app(
                transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
                session_idle_timeout=2 * limits.idle_seconds,
                max_sessions=None,
            ).routes
            if isinstance(r, Route) and r.path == MCP_PATH
        ]
        mcp_gate = McpGate(mcp_route.endpoint, auth, limits, opened=opened)
        agents.append(Route(MCP_PATH, mcp_gate))
    if installed("a2a"):
        from coordinator.server.a2a import A2A_PATH, a2a_routes

        agents += a2a_routes(gate, methods, public_url + A2A_PATH, auth)

    endpoint = ChapEndpoint(gate, auth, affinity)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        dispatcher.start()
        timer = None
        if sweep_interval > 0:
            timer = asyncio.create_task(sweep_every(dispatcher, target.sweep, sweep_interval))
        try:
            async with contextlib.AsyncExitStack() as running:
                await running.enter_async_context(observed.running(dispatcher, hub))
                if mcp_server is not None:
                    await running.enter_async_context(mcp_server.session_manager.run())
                yield
        finally:
            if timer is not None:
                timer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await timer
            if watch is not None:
                await watch.stop()
            if mcp_gate is not None:
                await mcp_gate.stop()
            # Runs after the server stopped taking requests: finish the calls
            # already queued, off the loop, so their writes reach the store.
            await asyncio.to_thread(dispatcher.close)

    routes: list[BaseRoute] = [Route(path, endpoint, methods=["POST", "OPTIONS"]) for path in PATHS]
    routes += agents
    if watch is not None:
        watch.watch(hub.credentials, hub.end_credential)
        if mcp_gate is not None:
            watch.watch(mcp_gate.credentials, mcp_gate.end_credential)
    routes += observed.routes(dispatcher, hub)
    routes += desk_routes(target, dispatcher, auth, hub, opened=opened)
    app = _Guarded(
        browser,
        lambda stack: ChapShortcut(stack, endpoint, max_body_bytes),
        routes=routes,
        lifespan=lifespan,
        # Every route's body is bounded before the route sees it (server/body.py).
        middleware=[Middleware(BodyLimit, max_body_bytes=max_body_bytes, auth=auth)],
        exception_handlers={HTTPException: _http_error, Exception: _internal_error},
    )
    # /chap/ is another path (404 JSON), not a redirect with an empty body.
    app.router.redirect_slashes = False
    app.state.dispatcher = dispatcher
    # Open event streams never finish on their own; whoever stops the server
    # ends them first (`app.state.events.close()`), or the stop waits for them.
    app.state.events = hub
    app.state.sessions = mcp_gate
    app.state.rights = watch
    return app


class _Guarded(Starlette):
    """Starlette with the browser guard outside everything, so that every
    answer, a defect's 500 included, carries its headers; inside it, the
    shortcut that answers an ordinary call without the stack
    (server/chap_route.py), unless middleware was added to the app since
    (`app.add_middleware`, as an instrumentation does): then every request
    takes the stack, so that middleware sees each call."""

    def __init__(self, policy: BrowserPolicy, shortcut: Callable[[ASGIApp], ASGIApp], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.policy = policy
        self.shortcut = shortcut
        self._own_middleware = len(kwargs.get("middleware") or ())

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        if len(self.user_middleware) == self._own_middleware:
            stack = self.shortcut(stack)
        return BrowserGuard(stack, self.policy)


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
    )


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
