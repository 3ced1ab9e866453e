"""The desk's HTTP routes: its pages, its three reads and its event stream."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from coordinator.engine.wire import INVALID_PARAMS, error_response
from coordinator.errors import OpenLimitError, RpcError
from coordinator.extras import needs
from coordinator.listeners import Change
from coordinator.server.auth import Authenticator, Identity
from coordinator.server.authz import readable, visible_to
from coordinator.server.desk.events import EventHub, resume_points
from coordinator.server.desk.snapshots import held_workspace, snapshot_chunks
from coordinator.server.dispatcher import SerialDispatcher
from storage import Store

with needs("server"):
    from starlette.requests import Request
    from starlette.responses import FileResponse, Response, StreamingResponse
    from starlette.routing import BaseRoute, Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.types import Receive, Scope, Send

if TYPE_CHECKING:
    from coordinator.engine.registry import CallCheck

__all__ = ["STATIC", "DeskTarget", "desk_routes"]

STATIC = Path(__file__).resolve().parent / "static"

_encode = msgspec.json.Encoder().encode


class DeskTarget(Protocol):
    """What the HTTP app needs from a coordinator (a Coordinator has it all)."""

    def dispatch(
        self, envelope: dict[str, Any] | str | bytes, *, authorise: CallCheck | None = None
    ) -> dict[str, Any]: ...

    def batch(self) -> AbstractContextManager[None]: ...

    @property
    def workspaces(self) -> Mapping[str, Any]: ...

    def snapshot(self, workspace_id: str) -> dict[str, Any]: ...

    def workspace_ids(self) -> list[str]: ...

    def sweep(self) -> list[Any]: ...

    def add_change_listener(self, listener: Callable[[Change], None]) -> object: ...

    @property
    def store(self) -> Store: ...


def desk_routes(
    target: DeskTarget,
    dispatcher: SerialDispatcher,
    auth: Authenticator | None,
    hub: EventHub,
    opened: Callable[[], None] = lambda: None,
) -> list[BaseRoute]:
    """Routes for the desk; `hub` listens to `target`'s changes while any stream is open.
    `opened` is called on the event loop after each stream opens (to start
    the re-check of the rights streams hold)."""
    hub.listen_on(target.add_change_listener)

    async def read(workspace: str, start: int, stop: int) -> list[bytes]:
        # On the worker thread, between calls: a bounded page of the store
        # (none for a workspace it does not hold).
        return await dispatcher.run(lambda: target.store.read_entry_texts(workspace, start, stop))

    def principal(request: Request) -> str | None:
        if auth is None:
            return None
        return auth.principal(request.headers.get("authorization"))

    def identity(request: Request) -> Identity | None:
        # Under auth, the reads below are the members' (server/authz.py).
        if auth is None:
            return None
        return auth.identity(request.headers.get("authorization"))

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers=_NO_STORE)

    async def session(request: Request) -> Response:
        try:
            who = principal(request)
        except RpcError as err:
            return _refused(err)
        return _json({"auth": auth is not None, "principal": who})

    async def workspaces(request: Request) -> Response:
        try:
            who = identity(request)
        except RpcError as err:
            return _refused(err)
        # On the dispatcher's thread: membership is the writer's to change.
        if who is None:
            ids = await dispatcher.run(target.workspace_ids)
        else:
            visible = visible_to(target, who)
            ids = await dispatcher.run(lambda: [w for w in target.workspace_ids() if visible(w)])
        return _json({"workspaces": sorted(ids)})

    async def snapshot(request: Request) -> Response:
        try:
            who = identity(request)
        except RpcError as err:
            return _refused(err)
        wid = request.query_params.get("workspace")
        if not wid:
            return _bad("Name the workspace: /desk/api/snapshot?workspace=wsp_...")
        if who is not None:
            refusal = await dispatcher.run(lambda: readable(target, who, wid))
            if refusal is not None:
                return _json(error_response(None, refusal), 403)
        # Streamed from the store, off the dispatcher (desk/snapshots.py).
        held = await held_workspace(target.store, wid)
        if held is None:
            return _bad(f"Unknown workspace {wid!r}", status=404)
        return StreamingResponse(
            snapshot_chunks(target.store, held), media_type="application/json", headers=_NO_STORE
        )

    async def events(request: Request) -> Response:
        try:
            who = identity(request)
        except RpcError as err:
            return _refused(err)
        workspace = request.query_params.get("workspace") or None
        try:
            resume = resume_points(request.headers.get("last-event-id"), workspace)
        except ValueError as exc:
            return _bad(str(exc))
        visible = None
        if who is not None and workspace is not None:
            refusal = await dispatcher.run(lambda: readable(target, who, workspace))
            if refusal is not None:
                return _json(error_response(None, refusal), 403)
        elif who is not None:
            # A stream of every workspace carries only those the principal may read.
            visible = visible_to(target, who)
            readable_now = await dispatcher.run(lambda: [w for w in resume if visible(w)])
            resume = {w: resume[w] for w in readable_now}
        credential = request.headers.get("authorization") if auth is not None else None
        try:
            stream = hub.open(workspace, who.principal if who is not None else None, credential, visible)
        except OpenLimitError as err:
            return _json(error_response(None, err), 429)
        except RpcError as err:
            return _json(error_response(None, err), 503)
        opened()
        return _Stream(
            hub.events(stream, resume, read),
            lambda: hub.release(stream),
            media_type="text/event-stream",
            # Connection: close, so a stream that ended closes its connection.
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no", "Connection": "close"},
        )

    routes: list[BaseRoute] = [
        Route("/", page, methods=["GET"]),
        Route("/desk/api/session", session, methods=["GET"]),
        Route("/desk/api/workspaces", workspaces, methods=["GET"]),
        Route("/desk/api/snapshot", snapshot, methods=["GET"]),
        Route("/chap/events", events, methods=["GET"]),
        Mount("/desk/static", StaticFiles(directory=STATIC), name="desk-static"),
    ]
    return routes


_NO_STORE = {"Cache-Control": "no-store"}


class _Stream(StreamingResponse):
    """A StreamingResponse that releases its stream however it ends, even
    before its body was started (a client gone before the headers were sent)."""

    def __init__(self, body: Any, release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(body, **kwargs)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _json(payload: Any, status: int = 200) -> Response:
    return Response(_encode(payload), status, media_type="application/json", headers=_NO_STORE)


def _refused(err: RpcError) -> Response:
    response = _json(error_response(None, err), 401)
    response.headers["WWW-Authenticate"] = 'Bearer realm="chap"'
    return response


def _bad(message: str, status: int = 400) -> Response:
    return _json(error_response(None, RpcError(INVALID_PARAMS, message)), status)
