"""The desk's HTTP routes: its pages, its three reads and its event stream."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import msgspec

from coordinator.audit import AuditEntry
from coordinator.engine.wire import INVALID_PARAMS, error_response
from coordinator.errors import RpcError
from coordinator.extras import needs
from coordinator.server.auth import Authenticator
from coordinator.server.desk.events import EventHub
from coordinator.server.desk.snapshots import held_workspace, snapshot_chunks
from coordinator.server.dispatcher import SerialDispatcher
from storage import Store

with needs("server"):
    from starlette.requests import Request
    from starlette.responses import FileResponse, Response, StreamingResponse
    from starlette.routing import BaseRoute, Mount, Route
    from starlette.staticfiles import StaticFiles

__all__ = ["STATIC", "DeskTarget", "desk_routes"]

STATIC = Path(__file__).resolve().parent / "static"

_encode = msgspec.json.Encoder().encode


class DeskTarget(Protocol):
    """What the HTTP app needs from a coordinator (a Coordinator has it all)."""

    def dispatch(self, envelope: dict[str, Any] | str | bytes) -> dict[str, Any]: ...

    def batch(self) -> AbstractContextManager[None]: ...

    def snapshot(self, workspace_id: str) -> dict[str, Any]: ...

    @property
    def store(self) -> Store: ...

    def workspace_ids(self) -> list[str]: ...

    def sweep(self) -> list[Any]: ...

    def add_audit_listener(self, listener: Callable[[str, AuditEntry], None]) -> object: ...


def desk_routes(
    target: DeskTarget,
    dispatcher: SerialDispatcher,
    auth: Authenticator | None,
    hub: EventHub,
) -> list[BaseRoute]:
    """Routes for the desk; registers `hub` as an audit listener of `target`."""
    target.add_audit_listener(hub.publish)

    def principal(request: Request) -> str | None:
        if auth is None:
            return None
        return auth.principal(request.headers.get("authorization"))

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
            principal(request)
        except RpcError as err:
            return _refused(err)
        ids = await dispatcher.run(target.workspace_ids)
        return _json({"workspaces": sorted(ids)})

    async def snapshot(request: Request) -> Response:
        try:
            principal(request)
        except RpcError as err:
            return _refused(err)
        wid = request.query_params.get("workspace")
        if not wid:
            return _bad("Name the workspace: /desk/api/snapshot?workspace=wsp_...")
        # Streamed from the store, off the dispatcher (desk/snapshots.py).
        held = await held_workspace(target.store, wid)
        if held is None:
            return _bad(f"Unknown workspace {wid!r}", status=404)
        return StreamingResponse(
            snapshot_chunks(target.store, held), media_type="application/json", headers=_NO_STORE
        )

    async def events(request: Request) -> Response:
        try:
            principal(request)
        except RpcError as err:
            return _refused(err)
        workspace = request.query_params.get("workspace") or None
        return StreamingResponse(
            hub.stream(workspace),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
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


def _json(payload: Any, status: int = 200) -> Response:
    return Response(_encode(payload), status, media_type="application/json", headers=_NO_STORE)


def _refused(err: RpcError) -> Response:
    response = _json(error_response(None, err), 401)
    response.headers["WWW-Authenticate"] = 'Bearer realm="chap"'
    return response


def _bad(message: str, status: int = 400) -> Response:
    return _json(error_response(None, RpcError(INVALID_PARAMS, message)), status)
