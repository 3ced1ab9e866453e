"""MCP sessions at /mcp: opened only after authentication, capped, and ended
when idle or when their token no longer authenticates.

`McpGate` stands in front of the MCP SDK's streamable-HTTP endpoint. With
an Authenticator every request must carry a valid bearer token (else 401,
before the SDK sees it, so an unauthenticated `initialize` holds nothing),
and a session is bound to the token that opened it. A request that would
open a session past a cap (in all, or per principal: without authentication
every caller counts as one) first ends the oldest idle session counted
against that cap; when none is idle it is refused, 429. A session with no
request in flight for `idle_seconds` is ended. Sessions are ended the way a
client ends its own, with DELETE, so the SDK forgets them as it always does.
The rules are in SPECIFICATION.md, "MCP and A2A".
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from coordinator.engine.incidents import logged
from coordinator.engine.wire import OPEN_LIMIT_REACHED, STORE_WRITE_FAILED, error_response
from coordinator.errors import OpenLimitError, RpcError
from coordinator.extras import needs
from coordinator.server.auth import Authenticator
from storage import StoreError

with needs("mcp"):
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
    from starlette.datastructures import Headers
    from starlette.responses import Response
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["IDLE_SECONDS", "MAX_SESSIONS", "MAX_SESSIONS_PER_PRINCIPAL", "McpGate", "SessionLimits"]

log = logging.getLogger(__name__)

MAX_SESSIONS = 1024
MAX_SESSIONS_PER_PRINCIPAL = 64
IDLE_SECONDS = 600.0


@dataclass(frozen=True)
class SessionLimits:
    """How many MCP sessions may be open, in all and per principal, and how
    long one may sit idle before it is ended."""

    max_sessions: int = MAX_SESSIONS
    max_sessions_per_principal: int = MAX_SESSIONS_PER_PRINCIPAL
    idle_seconds: float = IDLE_SECONDS

    def __post_init__(self) -> None:
        if self.max_sessions < 1 or self.max_sessions_per_principal < 1:
            raise ValueError("session caps must be positive")
        if not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds must be positive, got {self.idle_seconds}")

_SESSION_HEADER = "mcp-session-id"
# Headers of the opening request a DELETE of the session repeats: the SDK
# checks Host and Origin (DNS-rebinding protection) on every request.
_KEPT = (b"host", b"origin", b"authorization")
_encode = msgspec.json.Encoder().encode


class _Session:
    __slots__ = ("id", "principal", "credential", "scope", "busy", "last_used")

    def __init__(self, principal: str, credential: str | None, scope: Scope, now: float) -> None:
        self.id = ""  # known once the SDK has answered the opening request
        self.principal = principal
        self.credential = credential
        self.scope = scope
        self.busy = 1
        self.last_used = now


class McpGate:
    """An ASGI app: `sdk` (the SDK's /mcp endpoint) behind authentication and
    caps; `opened` is called after each session opens (to start the re-check
    of the rights sessions hold)."""

    def __init__(
        self,
        sdk: ASGIApp,
        auth: Authenticator | None = None,
        limits: SessionLimits = SessionLimits(),
        *,
        opened: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sdk = sdk
        self._opened = opened
        self._auth = auth
        self.max_sessions = limits.max_sessions
        self.max_sessions_per_principal = limits.max_sessions_per_principal
        self.idle_seconds = limits.idle_seconds
        self._clock = clock
        # Open sessions, and those being opened (id ""), oldest first.
        self._sessions: list[_Session] = []
        self._sweeper: asyncio.Task[None] | None = None
        self._ending: set[asyncio.Task[None]] = set()

    # -- what others ask ----------------------------------------------------

    def open_sessions(self, principal: str | None = None) -> int:
        """Sessions open (or being opened), in all or of `principal`."""
        return sum(1 for s in self._sessions if principal is None or s.principal == principal)

    def credentials(self) -> set[str]:
        """The tokens holding sessions (for the rights re-check)."""
        return {s.credential for s in self._sessions if s.credential is not None and s.id}

    def end_credential(self, credential: str, reason: str) -> int:
        """On the event loop: end every session of `credential`."""
        mine = [s for s in self._sessions if s.credential == credential and s.id]
        for session in mine:
            task = asyncio.get_running_loop().create_task(self._end(session))
            self._ending.add(task)
            task.add_done_callback(self._ending.discard)
        return len(mine)

    async def stop(self) -> None:
        """Stop the idle sweep (the SDK ends the sessions themselves on shutdown)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None

    # -- serving ------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._sdk(scope, receive, send)
            return
        headers = Headers(scope=scope)
        credential = headers.get("authorization")
        principal = ""
        if self._auth is not None:
            try:
                principal = self._auth.principal(credential)
            except RpcError as err:
                await _answer(scope, receive, send, 401, err, {"WWW-Authenticate": 'Bearer realm="chap"'})
                return
            except (StoreError, sqlite3.Error) as exc:
                # Fail closed, as POST /chap does: nothing opened, the cause logged.
                log_id = logged(log, "the token table could not be read", exc)
                await _answer(scope, receive, send, 503, RpcError(
                    STORE_WRITE_FAILED,
                    "The bearer token could not be checked (the database did not answer); retry. "
                    f"The server logged the cause as {log_id}.",
                    {"log_id": log_id},
                ))
                return
            assert credential is not None
            # The SDK binds a session to the credential that opened it.
            digest = hashlib.sha256(credential.encode()).hexdigest()[:32]
            scope = {**scope, "user": AuthenticatedUser(
                AccessToken(token=digest, client_id=principal, scopes=[], subject=digest)
            )}
        session_id = headers.get(_SESSION_HEADER)
        holder = credential if self._auth is not None else None
        era = headers.get("mcp-protocol-version")
        if session_id is None and scope["method"] == "POST" and (era is None or era in HANDSHAKE_PROTOCOL_VERSIONS):
            # Only the `initialize` era opens sessions; the stateless one never does.
            await self._open(principal, holder, scope, receive, send)
            return
        session = next((s for s in self._sessions if s.id == session_id), None)
        if session is None or session.credential != holder:
            # Unknown, or another token's: the SDK answers 404 either way.
            await self._sdk(scope, receive, send)
            return
        session.busy += 1
        status = 0
        try:
            status = await _served(self._sdk, scope, receive, send)
        finally:
            session.busy -= 1
            session.last_used = self._clock()
            if status == 404 or (scope["method"] == "DELETE" and status < 300):
                self._forget(session)

    async def _open(
        self, principal: str, credential: str | None, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            victims = self._room_for(principal)
        except OpenLimitError as err:
            await _answer(scope, receive, send, 429, err)
            return
        session = _Session(principal, credential, scope, self._clock())
        self._sessions.append(session)
        for victim in victims:
            await self._end(victim)

        async def watch(message: Message) -> None:
            # Known by its id before the client can use it (the SDK returns
            # only after the answer is sent).
            if message["type"] == "http.response.start" and message["status"] < 400:
                session.id = Headers(raw=message.get("headers", [])).get(_SESSION_HEADER) or ""
            await send(message)

        try:
            await self._sdk(scope, receive, watch)
        finally:
            session.busy -= 1
            session.last_used = self._clock()
            if session.id:
                self._sweep_soon()
                self._opened()
            else:  # refused, or stateless: nothing was opened
                self._forget(session)

    def _room_for(self, principal: str) -> list[_Session]:
        """The idle sessions to end so one more fits both caps, oldest first;
        OpenLimitError when a cap is full of busy ones."""
        victims: list[_Session] = []
        for cap, mine, whose in (
            (self.max_sessions_per_principal, [s for s in self._sessions if s.principal == principal],
             principal or "anonymous callers"),
            (self.max_sessions, list(self._sessions), None),
        ):
            counted = [s for s in mine if s not in victims]
            if len(counted) < cap:
                continue
            idle = [s for s in counted if s.busy == 0 and s.id]
            if not idle:
                data: dict[str, Any] = {"limit": cap, "open": len(counted)}
                if whose is not None:
                    data["principal"] = whose
                raise OpenLimitError(
                    OPEN_LIMIT_REACHED,
                    f"{len(counted)} MCP sessions are open{f' for {whose}' if whose else ''}, "
                    "the limit, and all are busy; end one (DELETE /mcp with its "
                    "Mcp-Session-Id) or retry later",
                    data,
                )
            victims.append(min(idle, key=lambda s: s.last_used))
        return victims

    # -- ending ---------------------------------------------------------------

    def _forget(self, session: _Session) -> None:
        with contextlib.suppress(ValueError):
            self._sessions.remove(session)

    async def _end(self, session: _Session) -> None:
        """Delete the session through the SDK, as its client would."""
        self._forget(session)
        headers = [(k, v) for k, v in session.scope["headers"] if k in _KEPT]
        headers.append((_SESSION_HEADER.encode(), session.id.encode()))
        scope = {**session.scope, "method": "DELETE", "headers": headers}
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"", "more_body": False}
            return {"type": "http.disconnect"}

        async def discard(message: Message) -> None:
            return None

        await self._sdk(scope, receive, discard)

    def _sweep_soon(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def _sweep(self) -> None:
        """End sessions idle for `idle_seconds`, while any are open."""
        step = min(self.idle_seconds / 4, 5.0)
        while any(s.id for s in self._sessions):
            await asyncio.sleep(step)
            now = self._clock()
            for session in [s for s in self._sessions if s.id and s.busy == 0]:
                if now - session.last_used >= self.idle_seconds:
                    await self._end(session)


async def _served(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> int:
    """Run `app` for one request; the status it answered (0: none)."""
    status = 0

    async def watch(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        await send(message)

    await app(scope, receive, watch)
    return status


async def _answer(
    scope: Scope, receive: Receive, send: Send, status: int, err: RpcError, extra: dict[str, str] | None = None
) -> None:
    response = Response(
        _encode(error_response(None, err)), status, media_type="application/json", headers=extra
    )
    await response(scope, receive, send)
