"""POST /chap: one JSON-RPC envelope in, the coordinator's answer out.

`ChapEndpoint` is that route as a plain ASGI app. The app mounts it twice
(server/http.py): as the Starlette route of /chap and /, and as
`ChapShortcut`, which answers an ordinary call (POST to one of those paths
with a declared Content-Length within the body limit) straight from inside
the browser guard, without the Starlette middleware and routing in between.
A call is most of what a server answers, and those layers cost more than the
coordinator's own work on it. Everything else (OPTIONS, a chunked or
oversized body, a body with no length) takes the full stack, where
`BodyLimit` reads or refuses it. Both paths give the same answers: the
browser guard has already run, the shortcut catches an unexpected error as
the stack's handler does (500 with a log id), and the route's own refusals
(401, 403, 503) are made in one place, `ChapEndpoint.answer`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import msgspec

from coordinator.engine.incidents import internal_error
from coordinator.engine.wire import (
    INTERNAL_ERROR,
    STORE_CONFLICT,
    STORE_WRITE_FAILED,
    STORED_OBJECT_UNREADABLE,
    error_response,
)
from coordinator.errors import DispatcherClosed, RpcError
from coordinator.extras import needs
from coordinator.server.auth import Authenticator
from coordinator.server.authz import Gatekeeper, authoriser

with needs("server"):
    from starlette.types import ASGIApp, Receive, Scope, Send

if TYPE_CHECKING:
    from coordinator.server.affinity import Affinity

__all__ = ["PATHS", "ChapEndpoint", "ChapShortcut", "status_of"]

log = logging.getLogger(__name__)

PATHS = ("/chap", "/")

_encode = msgspec.json.Encoder().encode

# Errors that are not the caller's to fix. A defect, or a stored row the
# operator must repair: 500. The store down or out-raced twice: nothing was
# applied and the same call may succeed later, so 503.
_SERVER_SIDE = {
    INTERNAL_ERROR: 500,
    STORED_OBJECT_UNREADABLE: 500,
    STORE_WRITE_FAILED: 503,
    STORE_CONFLICT: 503,
}

_JSON = (b"content-type", b"application/json")
_BEARER = (b"www-authenticate", b'Bearer realm="chap"')

# An answer: HTTP status, body, headers.
Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]


def status_of(response: dict[str, Any]) -> int:
    """The HTTP status of a coordinator's JSON-RPC response."""
    error = response.get("error")
    if error is None:
        return 200
    return _SERVER_SIDE.get(error.get("code"), 400)


def json_answer(status: int, payload: dict[str, Any]) -> Answer:
    """A JSON answer, with the headers Starlette's Response would give it."""
    body = _encode(payload)
    return status, body, [(b"content-length", str(len(body)).encode()), _JSON]


async def send_answer(send: Send, answer: Answer) -> None:
    status, body, headers = answer
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class ChapEndpoint:
    """The CHAP route as a plain ASGI app. With `auth`, a call needs a valid
    bearer token (or, with signatures, a signed envelope) and acts only as
    its principal; with `affinity` (a worker of `serve --workers N`), a call
    for a workspace another worker answers is passed to it."""

    def __init__(self, gate: Gatekeeper, auth: Authenticator | None, affinity: Affinity | None) -> None:
        self._gate = gate
        self._auth = auth
        self._affinity = affinity

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] == "OPTIONS":
            await send_answer(send, (204, b"", []))
            return
        body = await read_body(receive)
        if body is not None:
            await send_answer(send, await self.answer(scope, body))

    async def answer(self, scope: Scope, body: bytes) -> Answer:
        """The answer to the call in `body`, sent as `scope` says."""
        authorization = None
        if self._auth is not None or self._affinity is not None:
            authorization = _header(scope, b"authorization")
        affinity = self._affinity
        # Without a token where one is needed, the answer (401) is the same here.
        if (affinity is not None and not affinity.passed_on(scope)
                and (self._auth is None or authorization is not None)):
            elsewhere = affinity.elsewhere(body)
            if elsewhere is not None:
                passed = await affinity.forward(elsewhere, scope["raw_path"], scope["headers"], body)
                if passed is not None:
                    # As Starlette's Response(headers=...) gave them: one of
                    # each name, lower-cased, with a length.
                    named = {name.lower(): value for name, value in passed.headers}
                    named.setdefault(b"content-length", str(len(passed.body)).encode())
                    return passed.status, passed.body, list(named.items())
        authorise = None
        if self._auth is not None:
            admission = self._auth.admission(authorization, body)
            if admission.refusal is not None:
                status, request_id, error = admission.refusal
                if status == 401:
                    status, payload, headers = json_answer(401, error_response(None, error))
                    return status, payload, [*headers, _BEARER]
                return json_answer(status, error_response(request_id, error))
            assert admission.identity is not None
            authorise = authoriser(admission.identity)
        try:
            response = await self._gate(body, authorise)
        except DispatcherClosed:
            return json_answer(503, error_response(
                None, RpcError(INTERNAL_ERROR, "The server is shutting down; retry elsewhere")))
        return json_answer(status_of(response), response)


class ChapShortcut:
    """ASGI middleware answering an ordinary call with `endpoint` directly,
    and passing every other request on to `app` (the full stack)."""

    def __init__(self, app: ASGIApp, endpoint: ChapEndpoint, max_body_bytes: int) -> None:
        self.app = app
        self.endpoint = endpoint
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in PATHS
                or not self._plain(scope["headers"])):
            await self.app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return
        try:
            answer = await self.endpoint.answer(scope, body)
        except Exception as exc:
            # What the full stack's handler answers to a defect.
            error = internal_error(log, f"unhandled error serving POST {scope['path']}", exc)
            answer = json_answer(500, error_response(None, error))
        await send_answer(send, answer)

    def _plain(self, headers: list[tuple[bytes, bytes]]) -> bool:
        """A declared length within the limit and no transfer coding: a body
        BodyLimit would pass on unread."""
        declared = None
        for name, value in headers:
            if name == b"content-length":
                declared = value
            elif name == b"transfer-encoding":
                return False
        return declared is not None and declared.isdigit() and int(declared) <= self.max_body_bytes


async def read_body(receive: Receive) -> bytes | None:
    """The request's whole body; None when the client went away first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            value_text: str = value.decode("latin-1")
            return value_text
    return None
