"""CHAP over A2A: chapline as an agent other agents can delegate to.

The Agent Card lists every implemented CHAP method as a skill `chap.<method>`
(derived from the method registry), and one JSON-RPC endpoint that speaks
both A2A 1.0 (`SendMessage`, ...) and A2A 0.3 (`message/send`, ...), which
the TypeScript SDK and other 0.3 clients still send. A message names its
skill in its metadata (`{"skill": "chap.task.create"}`) with the params as
its first data part, or, as 0.3 clients send it, inside that data part
(`{"skill": ..., "params": {...}}`, or the params beside `skill`). The call
is dispatched through the coordinator's pipeline like any other, and the
answer comes back as a message whose data part is the result, or
`{"chap_error": code, "message": ..., "data"?}` with the part's metadata
`{"is_error": true}`; a 0.3 client gets it in 0.3's shape (`kind`).

Bodies are read with a bound and parsed as strict JSON before the SDK sees
them: the SDK's parser reads NaN, Infinity and numbers of any size, which it
then fails to serialise (and, kept in its task store, would fail every later
`ListTasks`). A failure inside the agent is answered -32603 with a log id,
as POST /chap answers a defect.

Under `--auth` a message is bound to its bearer token's principal as an MCP
call is (mcp_binding.py): `from` is filled in when absent, may name no one
else, and a human's decision is refused to any other participant. A
parameter the method does not declare is refused (-32602) with or without.

A2A carries numbers as doubles: whole numbers are given back their integer
form before dispatch, so they hash as CHAP requires.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
from typing import TYPE_CHECKING, Any

import msgspec

from coordinator import __version__
from coordinator.engine.incidents import internal_error, logged
from coordinator.engine.registry import Method
from coordinator.engine.wire import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    STORE_WRITE_FAILED,
    error_response,
)
from coordinator.errors import NotJsonError, RpcError
from coordinator.extras import needs
from coordinator.server.a2a_tasks import BoundedTaskStore
from coordinator.server.auth import Authenticator
from coordinator.server.authz import authoriser
from coordinator.server.catalogue import tool_name
from coordinator.server.mcp_binding import (
    Binding,
    authenticated,
    bind,
    may_call,
    unknown_parameters,
)
from coordinator.server.strict_json import loads
from storage import StoreError

with needs("a2a"):
    from a2a.helpers.proto_helpers import get_data_parts, new_data_message
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
    from a2a.utils.constants import TransportProtocol
    from google.protobuf.json_format import MessageToDict
    from starlette.authentication import SimpleUser
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route
    from starlette.types import Message, Receive

if TYPE_CHECKING:
    from coordinator.server.mcp import AsyncDispatch

__all__ = ["A2A_PATH", "ChaplineAgentExecutor", "a2a_routes", "agent_card"]

log = logging.getLogger(__name__)

A2A_PATH = "/a2a"


def agent_card(url: str, methods: list[Method], *, version: str = __version__) -> AgentCard:
    """The card served at /.well-known/agent-card.json; `url` is where
    `message/send` is posted (this server's /a2a)."""
    return AgentCard(
        name="chapline",
        description=(
            "A CHAP (Collaborative Human-Agent Protocol) coordinator: each skill is one CHAP "
            "method; agents draft work, humans approve, edit or reject it, and every "
            "accepted call is kept in a hash-linked audit log."
        ),
        version=version,
        # One endpoint, both versions; the SDK derives the 0.3 card fields
        # (`url`, `protocolVersion`, `preferredTransport`) from the second.
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding=TransportProtocol.JSONRPC, protocol_version=version)
            for version in ("1.0", "0.3")
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["data"],
        default_output_modes=["data"],
        skills=[
            AgentSkill(
                id=tool_name(m),
                name=tool_name(m),
                description=m.description,
                tags=["chap", m.name.split(".", 1)[0]],
                input_modes=["data"],
                output_modes=["data"],
            )
            for m in methods
            if m.handler is not None
        ],
    )


def _integers(value: Any) -> Any:
    """Whole doubles back to integers, all the way down."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers(v) for v in value]
    return value


class ChaplineAgentExecutor(AgentExecutor):
    """Answers each message with one CHAP call, dispatched through `call`."""

    def __init__(
        self, call: AsyncDispatch, methods: list[Method], auth: Authenticator | None = None
    ) -> None:
        self._call = call
        self._auth = auth
        self._methods = {tool_name(m): m for m in methods if m.handler is not None}
        self._numbers = itertools.count(1)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        try:
            payload, failed = await self._answer(context)
        except Exception as exc:
            # Answered, never raised: the SDK would send the exception's text
            # and keep a failed task behind.
            error = internal_error(log, "an A2A message could not be answered", exc)
            payload, failed = _error(error.code, error.message, error.data), True
        reply = new_data_message(payload, context_id=context.context_id, task_id=context.task_id)
        if failed:
            reply.parts[0].metadata.update({"is_error": True})
        await event_queue.enqueue_event(reply)

    async def _answer(self, context: RequestContext) -> tuple[dict[str, Any], bool]:
        message = context.message
        if message is None:
            return _error(INVALID_PARAMS, "Invalid params: the request carries no message"), True
        skill, params, where = _skill_and_params(
            MessageToDict(message.metadata), [_integers(p) for p in get_data_parts(message.parts)]
        )
        method = self._methods.get(skill) if isinstance(skill, str) else None
        if method is None:
            return _error(
                METHOD_NOT_FOUND,
                f"Unknown skill: {skill!r}; name one of the card's skills (chap.<method>) "
                'in the message metadata as {"skill": "chap.task.create"}, or in the data '
                'part as {"skill": "chap.task.create", "params": {...}}',
            ), True
        if not isinstance(params, dict):
            return _error(INVALID_PARAMS, f"Invalid params: {where} must be an object"), True
        number = next(self._numbers)

        def envelope_of(params: dict[str, Any]) -> bytes:
            return msgspec.json.encode({"jsonrpc": "2.0", "id": f"a2a-{number}", "method": method.name, "params": params})

        principal = None
        identity = None
        if self._auth is not None:
            # Bound as MCP is under --auth: to the token's principal (mcp_binding.py).
            header = (context.call_context.state.get("headers") or {}).get("authorization")
            admitted = authenticated(self._auth, header, envelope_of(params))
            if isinstance(admitted, RpcError):
                return _error(admitted.code, admitted.message, admitted.data), True
            identity = admitted
            principal = identity.principal
        refused = may_call(method, Binding(principal)) or unknown_parameters(method, params)
        if refused is None:
            params, refused = bind(method, params, principal, "the principal of its bearer token")
        if refused is not None:
            return _error(refused.code, refused.message, refused.data), True
        body = envelope_of(params)
        response = await (self._call(body) if identity is None else self._call(body, authoriser(identity)))
        if "error" in response:
            error = response["error"]
            return _error(error.get("code"), error.get("message"), error.get("data")), True
        result = response.get("result")
        return (result if isinstance(result, dict) else {"result": result}), False

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # Every call is answered within its own message/send: nothing runs on.
        return None


def _skill_and_params(metadata: dict[str, Any], parts: list[Any]) -> tuple[Any, Any, str]:
    """The skill a message names, its params, and where the params were
    found (for a message about them). The metadata's skill wins, with the
    first data part as the params; without one, the first data part may
    name it (0.3 clients), the params being its `params` or its other keys."""
    data = parts[0] if parts else {}
    skill = metadata.get("skill")
    if skill is not None or not isinstance(data, dict) or "skill" not in data:
        return skill, data, "the first data part"
    rest = {k: v for k, v in data.items() if k != "skill"}
    if "params" not in rest:
        return data["skill"], rest, "the data part"
    if len(rest) > 1:
        return data["skill"], None, 'the data part (with "params", give nothing else beside "skill")'
    return data["skill"], rest["params"], 'the data part\'s "params"'


def _error(code: int, message: str, data: Any = None) -> dict[str, Any]:
    out: dict[str, Any] = {"chap_error": code, "message": message}
    if data is not None:
        out["data"] = data
    return out


def a2a_routes(
    call: AsyncDispatch,
    methods: list[Method],
    url: str,
    auth: Authenticator | None = None,
) -> list[Route]:
    """The Agent Card route and the JSON-RPC route at A2A_PATH (A2A 1.0 and
    0.3). With `auth`, each message is held to the rules of POST /chap. A
    body that is not strict JSON is refused before the SDK reads it (one
    over the server's body limit never gets here: server/body.py)."""
    card = agent_card(url, methods)
    handler = DefaultRequestHandler(
        agent_executor=ChaplineAgentExecutor(call, methods, auth),
        task_store=BoundedTaskStore(),
        agent_card=card,
    )
    (sdk,) = create_jsonrpc_routes(handler, rpc_url=A2A_PATH, enable_v0_3_compat=True)

    async def endpoint(request: Request) -> Response:
        if auth is not None:
            # Before anything is read or kept: a caller without a valid
            # token leaves no task behind. Its tasks are kept as its own.
            try:
                request.scope["user"] = SimpleUser(auth.principal(request.headers.get("authorization")))
            except RpcError as err:
                return _refusal(err, 401)
            except (StoreError, sqlite3.Error) as exc:  # fail closed, as POST /chap does
                log_id = logged(log, "the token table could not be read", exc)
                return _refusal(RpcError(
                    STORE_WRITE_FAILED,
                    f"The bearer token could not be checked (the database did not answer); retry. "
                    f"The server logged the cause as {log_id}.",
                    {"log_id": log_id},
                ), 503)
        body = await request.body()  # at most the server's body limit (server/body.py)
        try:
            loads(body)
        except NotJsonError as exc:
            return _refusal(RpcError(PARSE_ERROR, f"Parse error: the body is not JSON: {exc.reason}"))
        served: Response = await sdk.endpoint(Request(request.scope, _replay(body, request.receive)))
        return served

    return [*create_agent_card_routes(card), Route(A2A_PATH, endpoint, methods=["POST"])]


def _refusal(error: RpcError, status: int = 200) -> Response:
    # A2A answers JSON-RPC errors with 200, as the SDK does; no envelope, no
    # id. A missing or invalid token is 401, as on POST /chap.
    response = Response(msgspec.json.encode(error_response(None, error)), status, media_type="application/json")
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="chap"'
    return response


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` with the body, already read, given back first."""
    pending = [body]

    async def replayed() -> Message:
        if pending:
            return {"type": "http.request", "body": pending.pop(), "more_body": False}
        return await receive()

    return replayed
